"""`vllm serve`'s own option check: the emulated vLLM version's option strings (data/vllm_flags.json, derived from
vLLM's source by images/standin/tools/vllm_flags.py) and argparse's rules for them, so a misspelled or removed flag
exits 2 with argparse's message as the real `vllm serve` does (vLLM's FlexibleArgumentParser is an argparse
ArgumentParser: vllm/utils/argparse_utils.py in 0.13.0 and later, vllm/utils/__init__.py in 0.11.0)."""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Dict, List, Sequence, Tuple

FLAG, VALUE, OPTIONAL, LIST = "flag", "value", "optional", "list"
USAGE = "usage: vllm serve [model_tag] [options]"  # vllm/entrypoints/cli/serve.py: subparser_init's usage
_DATA = os.path.join(os.path.dirname(__file__), "data", "vllm_flags.json")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher
_NAME_PART = re.compile(r"(?<=--)[^.]*")  # FlexibleArgumentParser: "everything between the first -- and the first ."


class UsageError(ValueError):
    """What argparse prints after `vllm serve: error: ` before exiting 2."""


@functools.lru_cache(maxsize=None)
def options(vllm_version: str) -> Dict[str, str]:
    """{option string: kind} of `vllm serve` in this vLLM version."""
    with open(_DATA, encoding="utf-8") as f:
        kinds = json.load(f)[vllm_version]
    return {name: kind for kind, names in kinds.items() for name in names}


def _flexible(argv: Sequence[str]) -> List[str]:
    """FlexibleArgumentParser.parse_args's rewriting before argparse sees the words: `--a_b` -> `--a-b` up to
    the first dot; `-O3`/`-O=3`/`-O 3` -> an optimization level (every emulated version accepts these forms);
    dotted JSON keys `--x.key v` -> `--x JSON`."""
    out: List[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            key, eq, value = word.partition("=")
            key = _NAME_PART.sub(lambda m: m.group(0).replace("_", "-"), key, count=1)
            if "." in key:  # --json-arg.key[+] value: merged into one --json-arg JSON argument
                if not eq and i < len(words):
                    i += 1
                out += [key.split(".", 1)[0], "{}"]
                continue
            out.append(key + eq + value)
        elif word.startswith("-O") and word != "-O":
            out += ["-O", "3"]  # the level's value is checked by vLLM's config, not by argparse
        elif word == "-O" and i < len(words) and words[i] in ("0", "1", "2", "3"):
            out += ["-O", words[i]]
            i += 1
        else:
            out.append(word)
    return out


def _resolve(word: str, table: Dict[str, str]) -> Tuple[str, str]:
    """(option string, explicit `=value` or "") for an optional-looking word; UsageError when ambiguous, KeyError
    when unknown. argparse's allow_abbrev (vLLM never turns it off) accepts an unambiguous prefix of a long option."""
    name, eq, explicit = word.partition("=")
    if name in table:
        return name, explicit if eq else None
    if name.startswith("--"):
        matches = sorted(o for o in table if o.startswith(name))
        if len(matches) == 1:
            return matches[0], explicit if eq else None
        if len(matches) > 1:
            raise UsageError(f"ambiguous option: {name} could match {', '.join(matches)}")
    raise KeyError(word)


def check(argv: Sequence[str], vllm_version: str) -> None:
    """Walk the words after `serve MODEL` as argparse would; UsageError with argparse's message for an unknown
    option or a missing value (argparse reports every unrecognized word at once, after parsing)."""
    table = dict(options(vllm_version))
    if "-O" not in table:  # the versions that rewrite -O to --optimization-level (see _flexible)
        table["-O"] = VALUE
    words = _flexible(argv)
    extras: List[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            extras += words[i:]  # the only positional (model_tag) is taken: everything after is extra
            break
        if not word.startswith("-") or _NEGATIVE_NUMBER.match(word) or word == "-":
            extras.append(word)
            continue
        try:
            name, explicit = _resolve(word, table)
        except KeyError:
            extras.append(word)
            continue
        kind = table[name]
        if kind == FLAG:
            if explicit is not None:
                raise UsageError(f"argument {name}: ignored explicit argument {explicit!r}")
            continue
        if explicit is not None:
            continue
        taken = 0
        while i < len(words) and (not words[i].startswith("-") or _NEGATIVE_NUMBER.match(words[i])):
            i += 1
            taken += 1
            if kind in (VALUE, OPTIONAL):
                break
        if taken == 0 and kind == VALUE:
            raise UsageError(f"argument {name}: expected one argument")
        if taken == 0 and kind == LIST:
            raise UsageError(f"argument {name}: expected at least one argument")
    if extras:
        raise UsageError("unrecognized arguments: " + " ".join(extras))

