"""What `ranktable gen` is asked (the server-list flags) and what it would write, judged before any file is
written (pure)."""

from __future__ import annotations

import json
from typing import Optional, Sequence

from deployctl.errors import Problem, RanktableError, UsageError
from deployctl.ranktable.check import check_ranktable


def parse_server_list(flag: str, items: Sequence[str]) -> list[tuple[int, ...]]:
    """`4,5 6,7` -> [(4, 5), (6, 7)]: one item per instance (a quoted `"4,5 6,7"` works too)."""
    out = []
    for word in (w for item in items for w in item.split()):
        try:
            ids = tuple(int(part) for part in word.split(","))
        except ValueError:
            raise UsageError(f"{flag}: {word!r} is not a comma-separated list of device ids (e.g. 4,5)") from None
        if any(d < 0 for d in ids):
            raise UsageError(f"{flag}: {word!r}: device ids are 0 or more")
        out.append(ids)
    return out


def refuse_invalid(files: dict[str, str], cards: Optional[int]) -> None:
    """What gen would write must pass `ranktable validate` (a device IP twice, from hccn_tool, is caught here)."""
    problems = [Problem(v.path, v.message, file=name) for name, text in files.items()
                for v in check_ranktable(json.loads(text), cards=cards).problems]
    if problems:
        raise RanktableError(f"refused: {len(problems)} problem{'s' if len(problems) != 1 else ''} in the files "
                             "gen would write; no file written", problems)
