"""Prometheus durations (pure): the scrape interval as milliseconds, and multiples of it written back."""

from __future__ import annotations

import re

_UNITS = {"ms": 1, "s": 1000, "m": 60_000}

# Prometheus applies a change of a file_sd list (or its first read at start) within two 5 s ticks: the discovery
# manager sends target groups at most every `updatert` (5 s, prometheus/prometheus discovery/manager.go) and the
# scrape manager applies them on its reloader's tick (`--scrape.discovery-reload-interval`, default 5 s,
# scrape/manager.go `reloader`); a new target's first scrape then comes within one interval (its offset).
PICKUP_MS = 10_000


def millis(text: str) -> int:
    """`15s` -> 15000 (the forms monitor.scrape_interval allows: ms, s, m)."""
    found = re.fullmatch(r"([1-9][0-9]*)(ms|s|m)", text)
    if not found:
        raise ValueError(f"not a duration: {text!r}")
    return int(found.group(1)) * _UNITS[found.group(2)]


def duration(ms: int) -> str:
    """Milliseconds as Prometheus writes them: whole seconds as `Ns`, else `Nms`."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
