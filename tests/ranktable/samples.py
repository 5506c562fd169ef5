"""The vendor ranktable samples (tests/fixtures/formats/ranktable/<case>/): file text and facts."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parent.parent / "fixtures" / "formats" / "ranktable"
CASES = sorted(p.name for p in ROOT.iterdir() if (p / "facts.json").is_file())
MERGE_INPUTS = ROOT / "pd-2host-merged" / "inputs"


def text(case: str) -> str:
    return (ROOT / case / "stdout.txt").read_text(encoding="utf-8")


def document(case: str):
    return json.loads(text(case))


def facts(case: str) -> dict:
    return json.loads((ROOT / case / "facts.json").read_text(encoding="utf-8"))
