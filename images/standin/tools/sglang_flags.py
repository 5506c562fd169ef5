"""Write SGLang's `launch_server` option strings, read from SGLang's own parser, as the stand-in's data file.

    /tmp/sglang/bin/python images/standin/tools/sglang_flags.py > images/standin/standin/data/sglang_flags.json

Run by an interpreter that can import sglang.srt.server_args (tests/oracle/test_sglang_parser.py says how to make
one). The parser is the one `python -m sglang.launch_server` builds (prepare_server_args, sglang/srt/server_args.py:
668): each option gets a kind from its argparse action, "flag" (takes no value), "value" (one), "optional" (nargs
"?") or "list" (nargs "+" or "*"). Development tool only: the image does not contain it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys


def main() -> int:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    kinds: dict[str, list[str]] = {"flag": [], "value": [], "optional": [], "list": []}
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        kind = ("flag" if action.nargs == 0 else "optional" if action.nargs == "?"
                else "list" if action.nargs in ("+", "*") else "value")
        kinds[kind] += action.option_strings
    version = importlib.metadata.version("sglang")
    json.dump({version: {k: sorted(v) for k, v in kinds.items()}}, sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
