"""The AscendCloud release -> driver / firmware / CANN table (deployctl/data/compat.json).

vllm-ascend's counterpart (release line -> CANN, torch_npu, driver) is the `requires` of each row of
deployctl/data/server_profiles.json (spec/profiles.py; doctor's `server_profile` check)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Optional

from deployctl.facts.versions import same_version


@dataclass(frozen=True)
class CompatRow:
    ascendcloud: str
    driver: str
    firmware_min: Optional[str]
    firmware_max: Optional[str]
    cann: str
    vllm: Optional[str] = None
    base_image_tag: Optional[str] = None


def parse_compat(text: str) -> tuple[CompatRow, ...]:
    """The table from compat.json's text (pure; `compat_rows` reads the packaged file)."""
    fields = CompatRow.__dataclass_fields__
    return tuple(CompatRow(**{k: v for k, v in row.items() if k in fields}) for row in json.loads(text)["releases"])


@functools.lru_cache(maxsize=1)
def compat_rows() -> tuple[CompatRow, ...]:
    from importlib import resources

    return parse_compat(resources.files("deployctl").joinpath("data/compat.json").read_text(encoding="utf-8"))


def row_for_release(release: str, rows: Optional[tuple[CompatRow, ...]] = None) -> Optional[CompatRow]:
    """The row of an AscendCloud release (`6.3.909`), or None when the table does not know it."""
    return next((row for row in rows or compat_rows() if row.ascendcloud == release), None)


def rows_for_driver(driver: str, rows: Optional[tuple[CompatRow, ...]] = None) -> tuple[CompatRow, ...]:
    """Every release validated with this NPU driver version."""
    return tuple(row for row in rows or compat_rows() if same_version(row.driver, driver))
