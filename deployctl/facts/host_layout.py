"""What a vllm-ascend container is given from its host besides the spec's devices: how many NPUs the host has
(the Mooncake connector's random port range grows with it) and whether it has /usr/local/dcmi (the tutorials
mount it). One `sh` probe, parsed here (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from deployctl.errors import FactParseError
from deployctl.facts.probe import Probe

DCMI = "/usr/local/dcmi"
# one line per /dev/davinciN, then `dcmi` when the directory exists
LAYOUT_SCRIPT = (f'for d in /dev/davinci[0-9]*; do [ -e "$d" ] && echo "${{d#/dev/}}"; done; '
                 f'[ -d {DCMI} ] && echo dcmi; true')
_DAVINCI = re.compile(r"davinci(\d+)")


@dataclass(frozen=True)
class HostLayout:
    npus: tuple[int, ...]  # the /dev/davinciN ids the host has
    dcmi: bool  # /usr/local/dcmi exists


def parse_host_layout(text: str) -> HostLayout:
    npus, dcmi = [], False
    for number, line in enumerate(text.splitlines(), 1):
        word = line.strip()
        if not word:
            continue
        match = _DAVINCI.fullmatch(word)
        if match:
            npus.append(int(match.group(1)))
        elif word == "dcmi":
            dcmi = True
        else:
            raise FactParseError("host layout", number, line, "'davinciN' or 'dcmi'")
    return HostLayout(tuple(sorted(npus)), dcmi)


def layout_probe() -> Probe:
    return Probe(("sh", "-c", LAYOUT_SCRIPT), parse_host_layout, "layout", tool_name="sh")
