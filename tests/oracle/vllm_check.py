"""Run by an interpreter that has vLLM installed: feed each `vllm serve` argv to vLLM's own parser.

Input (stdin): a JSON list of {"name": ..., "argv": ["vllm", "serve", MODEL, ...]}.
Output (stdout): a JSON list of {"name", "ok", "problems": [...]}, one per argv. Only the standard library and
vLLM are imported: deployctl is not installed beside vLLM (its 9 GB of dependencies live in their own venv).

What is checked, per argv, the way `vllm serve` itself does it (vllm/entrypoints/cli/main.py, serve.py):
- the serve subcommand's parser (make_arg_parser) accepts every word: an unknown flag is argparse's exit 2;
- validate_parsed_serve_args passes (the checks vllm serve runs before it starts anything);
- EngineArgs.from_cli_args builds, and every `--flag value` comes back as the value deployctl meant: numbers
  as numbers, JSON as the same document (KVTransferConfig, compilation and speculative config built from it);
- a --kv-transfer-config builds vLLM's KVTransferConfig (its own field checks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys


def _serve_parser():
    # No accelerator here: the parser's defaults ask the platform for a device type. vLLM's own CLI makes the
    # same switch for `vllm bench` (vllm/entrypoints/cli/main.py); parsing does not depend on the device.
    from vllm import platforms
    from vllm.platforms.cpu import CpuPlatform

    if platforms.current_platform.is_unspecified():
        platforms.current_platform = CpuPlatform()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    sub = parser.add_subparsers(required=False, dest="subparser")
    ServeSubcommand().subparser_init(sub)
    return parser, sub.choices["serve"]


def _plain(value):
    """A parsed value as plain data, to compare with what deployctl wrote."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):  # pydantic configs
        return value.model_dump()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _same(written: str, parsed) -> bool:
    """Whether vLLM's parsed value is what the written word means."""
    if written.startswith("{"):
        meant = json.loads(written)
        got = _plain(parsed)
        if not isinstance(got, dict):
            return False
        # vLLM fills every field it has; each key deployctl wrote must come back with its value
        return all(key in got and _matches(value, got[key]) for key, value in meant.items())
    if isinstance(parsed, bool):
        return False  # a flag that takes no value never gets here
    if isinstance(parsed, (list, tuple)):
        return [str(v) for v in parsed] == [written] or str(parsed[0]) == written
    if isinstance(parsed, float):
        return parsed == float(written)
    if isinstance(parsed, int):
        return parsed == int(written)
    return str(parsed) == written


def _matches(meant, got) -> bool:
    if isinstance(meant, dict):
        return isinstance(got, dict) and all(k in got and _matches(v, got[k]) for k, v in meant.items())
    if isinstance(meant, str) and not isinstance(got, str):
        return str(got) == meant or (isinstance(got, int) and meant.isdigit() and int(meant) == got)
    return meant == got


def check(argv: list[str]) -> list[str]:
    """Every problem vLLM's parser finds with one `vllm serve ...` argv (empty when it parses as meant)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args

    if argv[:2] != ["vllm", "serve"]:
        return [f"not a vllm serve command: {argv[:2]}"]
    parser, serve = _serve_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv[1:])
    except SystemExit:
        return [line for line in err.getvalue().splitlines() if "error" in line] or [err.getvalue().strip()]
    problems = []
    try:
        validate_parsed_serve_args(args)
    except Exception as error:  # vLLM raises TypeError/ValueError here
        problems.append(f"validate_parsed_serve_args: {error}")
    try:
        AsyncEngineArgs.from_cli_args(args)
    except Exception as error:
        problems.append(f"EngineArgs: {type(error).__name__}: {error}")
    actions = serve._option_string_actions
    words = argv[3:]
    i = 0
    while i < len(words):
        word = words[i]
        flag, _, inline = word.partition("=")
        action = actions.get(flag)
        if action is None:
            i += 1
            continue
        if action.nargs == 0:
            i += 1
            continue
        value = inline if inline else words[i + 1]
        parsed = getattr(args, action.dest)
        if not _same(value, parsed):
            problems.append(f"{flag} {value}: vLLM parsed {parsed!r}")
        i += 1 if inline else 2
    kv = getattr(args, "kv_transfer_config", None)
    if kv is not None:
        from vllm.config import KVTransferConfig

        if not isinstance(kv, KVTransferConfig):  # the parser hands over a dict where it does not build one
            try:
                KVTransferConfig(**_plain(kv))
            except Exception as error:
                problems.append(f"KVTransferConfig: {error}")
    return problems


def check_engine_args(document: dict) -> list[str]:
    """Triton's vLLM backend builds AsyncEngineArgs(**model.json) (triton-inference-server/vllm_backend
    src/model.py): every key must be a field, and the engine arguments must build."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    _serve_parser()  # the platform, as above
    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    unknown = sorted(set(document) - fields)
    if unknown:
        return [f"not an engine argument: {', '.join(unknown)}"]
    try:
        AsyncEngineArgs(**document)
    except Exception as error:
        return [f"AsyncEngineArgs: {type(error).__name__}: {error}"]
    return []


def main() -> int:
    items = json.load(sys.stdin)
    results = []
    for item in items:
        problems = check_engine_args(item["engine_args"]) if "engine_args" in item else check(item["argv"])
        results.append({"name": item["name"], "ok": not problems, "problems": problems})
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
