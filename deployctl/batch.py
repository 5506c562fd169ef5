"""Run many read-only commands on a host in one round trip, each with its own stdout, stderr and exit code.

Each command is quoted word by word (`shlex.join`) into a constant frame; nothing is pasted unquoted.
"""

from __future__ import annotations

import re
import shlex
import uuid
from typing import Sequence

from deployctl.core import Command
from deployctl.facts.hccn_tool import HCCN_TOOL_DIR
from deployctl.transport import Result, Transport

# Vendor tools live outside a non-login shell's PATH on DevServers.
_PATH = f"PATH=$PATH:{HCCN_TOOL_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin; export PATH"


def batch_script(commands: Sequence[Command], marker: str) -> str:
    lines = [_PATH, 't=$(mktemp) || exit 1']
    for index, command in enumerate(commands):
        lines.append(f'echo "@@{marker} out {index}"; {shlex.join(command.argv)} 2>"$t" </dev/null; rc=$?; echo; '
                     f'echo "@@{marker} err {index}"; cat "$t"; echo; echo "@@{marker} rc {index} $rc"')
    lines.append('rm -f "$t"')
    return "\n".join(lines)


def run_batch(transport: Transport, commands: Sequence[Command], *, timeout: float = 120) -> list[Result]:
    """One `sh -c` on the host; returns one Result per command, in order."""
    if not commands:
        return []
    if len(commands) == 1:  # one command needs no frame: its own stdout, stderr and exit status come back
        result = transport.run(Command(("sh", "-c", f'{_PATH}; exec "$@"', "sh", *commands[0].argv)), timeout=timeout)
        return [Result(commands[0].argv, result.exit_code, result.stdout, result.stderr)]
    marker = uuid.uuid4().hex[:10]
    result = transport.run(Command(("sh", "-c", batch_script(commands, marker))), timeout=timeout)
    return parse_batch(result.stdout, commands, marker)


def parse_batch(text: str, commands: Sequence[Command], marker: str) -> list[Result]:
    pattern = re.compile(rf"^@@{marker} (out|err|rc) (\d+)(?: (-?\d+))?\n", re.MULTILINE)
    sections: dict[tuple[str, int], str] = {}
    codes: dict[int, int] = {}
    matches = list(pattern.finditer(text))
    for match, following in zip(matches, matches[1:] + [None]):
        kind, index = match.group(1), int(match.group(2))
        if kind == "rc":
            codes[index] = int(match.group(3))
            continue
        body = text[match.end(): following.start() if following else len(text)]
        sections[(kind, index)] = body[:-1] if body.endswith("\n") else body  # the frame's own `echo`
    results = []
    for index, command in enumerate(commands):
        code = codes.get(index, 255)  # missing: the batch died before this command finished
        results.append(Result(command.argv, code, sections.get(("out", index), ""), sections.get(("err", index), "")))
    return results
