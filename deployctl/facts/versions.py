"""Dotted version comparison for drivers and firmware (`580.159.04`, `24.1.rc2.2`, `8.0.RC3`)."""

from __future__ import annotations

import re

_RC = re.compile(r"^rc(\d*)$")


def version_key(text: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key: numeric parts compare as numbers (`04` == `4`); `rcN` sorts before any number."""
    key = []
    for part in text.strip().lower().split("."):
        rc = _RC.match(part)
        if part.isdigit():
            key.append((1, int(part), ""))
        elif rc:
            key.append((0, int(rc.group(1) or 0), ""))
        else:
            key.append((0, 0, part))
    return tuple(key)


def same_version(found: str, wanted: str) -> bool:
    """Exact match, ignoring case (`8.0.RC3` == `8.0.rc3`) and leading zeros."""
    return version_key(found) == version_key(wanted)


def version_at_least(found: str, minimum: str) -> bool:
    """`580.159.04` >= `550.54.15`; a missing trailing part counts as 0 (`23.0` == `23.0.0`)."""
    a, b = version_key(found), version_key(minimum)
    width = max(len(a), len(b))
    pad = (1, 0, "")
    return a + (pad,) * (width - len(a)) >= b + (pad,) * (width - len(b))


def version_within(found: str, low: str, high: str) -> bool:
    return version_at_least(found, low) and version_at_least(high, found)
