"""A probe: one command as argv words and the pure parser of what it prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Probe:
    """One command and its parser. `parse_failed_output`: the tool exits non-zero yet prints what we
    need on stdout (npu-smi's dcmi failure, docker version with the daemon down)."""

    argv: tuple[str, ...]
    parse: Callable[[str], Any]
    key: str = ""
    parse_failed_output: bool = False
    tool_name: str = ""  # for `sh -c` script probes: the tool a 127 means is missing (`docker`, `df`)
    waits_s: float = 0.0  # the longest its own bounded reads may wait in all: its batch's bound grows by it

    @property
    def tool(self) -> str:
        """The program's name as findings and install fixes use it (`hccn_tool`, `npu-smi`)."""
        return self.tool_name or self.argv[0].rsplit("/", 1)[-1]
