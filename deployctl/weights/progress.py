"""The host-side fetcher's progress lines (`P done total` on stderr), read on the control machine."""

from __future__ import annotations


def parse_progress(line: str) -> tuple[int, int] | None:
    """The fetcher's `P done total` line, else None."""
    parts = line.split()
    if len(parts) == 3 and parts[0] == "P" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2])
    return None
