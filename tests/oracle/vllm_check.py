"""Run by an interpreter that has vLLM installed: feed each `vllm serve` argv to vLLM's own parser.

Input (stdin): a JSON list of {"name": ..., "argv": ["vllm", "serve", MODEL, ...]} (or "engine_args": {...},
Triton's), each with "models": {path: config.json document} to build its engine config too.
Output (stdout): a JSON list of {"name", "ok", "problems": [...]}, one per item, with "built" and "set_aside"
(the reasons) where it had models. Only the standard library and vLLM are imported: deployctl is not installed
beside vLLM (its 9 GB of dependencies live in their own venv).

What is checked, per argv, the way `vllm serve` itself does it (vllm/entrypoints/cli/main.py, serve.py):
- the serve subcommand's parser (make_arg_parser) accepts every word: an unknown flag is argparse's exit 2;
- validate_parsed_serve_args passes (the checks vllm serve runs before it starts anything);
- EngineArgs.from_cli_args builds, and every `--flag value` comes back as the value deployctl meant: numbers
  as numbers, JSON as the same document (KVTransferConfig, compilation and speculative config built from it);
- a --kv-transfer-config builds vLLM's KVTransferConfig (its own field checks);
- given stub models (an item's "models": {path: config.json document}, no weights), the engine config builds as
  `vllm serve` builds it before it starts an engine (EngineArgs.create_engine_config, serve.py:192 headless and
  :313): ModelConfig from the stub's config.json (so whether the model is MoE), the parallel layout, the data
  parallel mode, the speculative config with its draft's config.json. The words listed in ASCEND_ONLY are set
  aside first, each with its reason (what vllm-ascend's NPU-only plugin registers cannot be loaded here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import tempfile

# No accelerator here: vLLM's CPU platform, which VLLM_TARGET_DEVICE=cpu selects before any probing
# (vllm/platforms/__init__.py:240-247 resolve_current_platform_cls_qualname, vLLM 0.33.0); set before vLLM is
# imported, since modules bind current_platform at import. Stub models are local directories, read as such.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


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


# What only vllm-ascend's plugin registers, which this interpreter cannot load (it imports torch_npu): the engine
# config is built with these words set aside, and each line says which it set aside and why. Left in, vLLM here
# refuses them as unknown ("Unknown quantization method: ascend", "Unsupported connector type: MooncakeConnectorV1").
def _ascend_quantization(flag: str, value: str) -> str | None:
    # vllm-ascend: @register_quantization_config(ASCEND_QUANTIZATION_METHOD) ("ascend", vllm_ascend/utils.py) on
    # AscendQuantConfig (vllm_ascend/quantization/quant_config.py; AscendModelSlimConfig in later releases)
    if flag == "--quantization" and value == "ascend":
        return ("--quantization ascend: registered by vllm-ascend's plugin (@register_quantization_config), "
                "not in vLLM's QUANTIZATION_METHODS (vllm/config/model.py _verify_quantization)")
    return None


def _plugin_connector(flag: str, value: str) -> str | None:
    if flag != "--kv-transfer-config":
        return None
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    document = json.loads(value)
    name = document.get("kv_connector")
    module = document.get("kv_connector_module_path") or ""
    if module.split(".")[0] != "vllm_ascend" and (name in KVConnectorFactory._registry or module):
        return None  # vLLM's own connector, or one it imports by path: built as it is
    # VllmConfig asks the connector class whether it supports the hybrid KV cache manager (vllm/config/vllm.py:
    # 2261-2264, factory.py:97-129): only vllm-ascend's registry (vllm_ascend/distributed/__init__.py, from
    # v0.14.0rc1 distributed/kv_transfer/__init__.py) or its modules know this one
    return (f"--kv-transfer-config {name}: a connector vllm-ascend registers, whose module imports torch_npu; "
            "its KVTransferConfig was built by the parser step")


ASCEND_ONLY = (_ascend_quantization, _plugin_connector)


def _set_aside(words: list[str], actions) -> tuple[list[str], list[str]]:
    """The words without what ASCEND_ONLY names, and why each was set aside."""
    kept, reasons = [], []
    i = 0
    while i < len(words):
        flag, _, inline = words[i].partition("=")
        action = actions.get(flag)
        takes = action is not None and action.nargs != 0 and not inline and i + 1 < len(words)
        value = words[i + 1] if takes else inline
        reason = next((r for r in (rule(flag, value) for rule in ASCEND_ONLY) if r), None) if action else None
        step = 2 if takes else 1
        if reason:
            reasons.append(reason)
        else:
            kept.extend(words[i:i + step])
        i += step
    return kept, reasons


def _stub_models(models: dict, root: str) -> re.Pattern | None:
    """Each model path as a directory under root holding only its config.json; the pattern finds the paths."""
    for path, config in models.items():
        directory = os.path.join(root, path.lstrip("/"))
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.json"), "w") as out:
            json.dump(config, out)
    if not models:
        return None
    return re.compile("|".join(re.escape(p) for p in sorted(models, key=len, reverse=True)))


def build_engine_config(argv: list[str], models: dict) -> tuple[bool, list[str], list[str]]:
    """(built, problems, set aside): `vllm serve`'s engine config for argv, its models stubbed by config.json."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    parser, serve = _serve_parser()
    words, reasons = _set_aside(argv[2:], serve._option_string_actions)  # the model: positional or --model
    with tempfile.TemporaryDirectory(prefix="vllm-stub-") as root:
        paths = _stub_models(models, root)
        moved = [paths.sub(lambda m: root + m.group(0), w) if paths else w for w in words]
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                args = parser.parse_args(["serve", *moved])
        except SystemExit:
            return False, ["the words left after setting aside do not parse"], reasons
        if args.model_tag is not None:  # what ServeSubcommand.cmd does first (vllm/entrypoints/cli/serve.py:56-57)
            args.model = args.model_tag
        try:
            AsyncEngineArgs.from_cli_args(args).create_engine_config(headless=args.headless)
        except Exception as error:
            return False, [f"create_engine_config: {type(error).__name__}: {_unmoved(error, root)}"], reasons
    return True, [], reasons


def _unmoved(error: Exception, root: str) -> str:
    return str(error).replace(root, "")


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


def build_triton_engine_config(document: dict, models: dict) -> tuple[bool, list[str], list[str]]:
    """Triton's backend then starts AsyncLLMEngine.from_engine_args, which builds the engine config
    (vllm/v1/engine/async_llm.py:288)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    _serve_parser()
    with tempfile.TemporaryDirectory(prefix="vllm-stub-") as root:
        paths = _stub_models(models, root)
        moved = json.loads(paths.sub(lambda m: root + m.group(0), json.dumps(document)) if paths
                           else json.dumps(document))
        try:
            AsyncEngineArgs(**moved).create_engine_config()
        except Exception as error:
            return False, [f"create_engine_config: {type(error).__name__}: {_unmoved(error, root)}"], []
    return True, [], []


def main() -> int:
    # vLLM logs to stdout (VLLM_LOGGING_STREAM's default, vllm/envs.py:863), and so do the subprocesses its registry
    # starts: the answer goes to the stdout this program was given, everything else to stderr
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    items = json.load(sys.stdin)
    results = []
    for item in items:
        engine = "engine_args" in item
        problems = check_engine_args(item["engine_args"]) if engine else check(item["argv"])
        result = {"name": item["name"]}
        if "models" in item and not problems:  # a line vLLM cannot parse has no engine config to build
            build = build_triton_engine_config if engine else build_engine_config
            built, more, reasons = build(item["engine_args"] if engine else item["argv"], item["models"])
            problems += more
            result.update(built=built, set_aside=reasons)
        result.update(ok=not problems, problems=problems)
        results.append(result)
        print(f"oracle: {item['name']}: {result}", file=sys.stderr, flush=True)
    json.dump(results, answer)
    answer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
