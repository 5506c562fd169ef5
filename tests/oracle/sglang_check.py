"""Run by an interpreter that has SGLang installed: feed each `python -m sglang.launch_server` argv to SGLang's own
parser.

Input (stdin): a JSON list of {"name": ..., "argv": [ARGS after `-m sglang.launch_server`]}.
Output (stdout): a JSON list of {"name", "ok", "problems": [...]}, one per argv. Only the standard library and
SGLang are imported: deployctl is not installed beside SGLang.

What is checked, per argv, the way `python -m sglang.launch_server` itself does it (sglang/launch_server.py calls
prepare_server_args(sys.argv[1:]), sglang/srt/server_args.py:668): its parser accepts every word (an unknown flag,
a bad number or a choice it lacks is argparse's exit 2), ServerArgs builds from the parsed namespace, and every
`--flag value` comes back as the value deployctl meant. Resolution (ServerArgs.resolve_once) is not run: it reads the
model's config.json, which the launcher does only once the weights are there.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def _same(written: str, parsed) -> bool:
    if isinstance(parsed, bool):
        return False  # a flag that takes no value never gets here
    if isinstance(parsed, (list, tuple)):
        return [str(v) for v in parsed] == [written] or (bool(parsed) and str(parsed[0]) == written)
    if isinstance(parsed, float):
        return parsed == float(written)
    if isinstance(parsed, int):
        return parsed == int(written)
    return str(parsed) == written


def check(argv: list[str]) -> list[str]:
    """Every problem SGLang's parser finds with one launch_server argv (empty when it parses as meant)."""
    import argparse

    from sglang.srt.server_args import ServerArgs, prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = prepare_server_args(argv)
    except SystemExit:
        return [line for line in err.getvalue().splitlines() if "error" in line] or [err.getvalue().strip()]
    except Exception as error:  # ServerArgs itself refused the values
        return [f"ServerArgs: {type(error).__name__}: {error}"]
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    actions = parser._option_string_actions
    problems = []
    i = 0
    while i < len(argv):
        flag, _, inline = argv[i].partition("=")
        action = actions.get(flag)
        if action is None or action.nargs == 0:
            i += 1
            continue
        value = inline if inline else argv[i + 1]
        parsed = getattr(args, action.dest, None)
        if not _same(value, parsed):
            problems.append(f"{flag} {value}: SGLang parsed {parsed!r}")
        i += 1 if inline else 2
    return problems


def main() -> int:
    items = json.load(sys.stdin)
    results = []
    for item in items:
        problems = check(item["argv"])
        results.append({"name": item["name"], "ok": not problems, "problems": problems})
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
