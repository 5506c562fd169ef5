"""Reading the spec corpus: each file states the errors it must produce in `# expect:` comment lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from deployctl.spec.load import check_spec_text

SPECS = Path(__file__).resolve().parent.parent / "fixtures" / "specs"
_EXPECT = re.compile(r"^# (expect|warn): (\d+):(\d+): (\S+): (.+)$")
# Variables the corpus reads; anything else is unset, whatever the caller's environment holds.
ENVIRON = {"DEPLOYCTL_TEST_TOKEN": "s3cr3t-value", "DEPLOYCTL_TEST_ADDRESS": "10.200.0.11",
           "DEPLOYCTL_TEST_NEWLINE_TOKEN": "abc\nLD_PRELOAD=/tmp/evil.so"}


@dataclass(frozen=True)
class Expected:
    severity: str  # expect | warn
    line: int
    column: int
    path: str
    message: str  # a substring of the real message


def expectations(text: str) -> list[Expected]:
    found = []
    for line in text.splitlines():
        match = _EXPECT.match(line)
        if match:
            kind, row, col, path, message = match.groups()
            found.append(Expected(kind, int(row), int(col), path, message))
    return found


def check_file(path: Path):
    """(errors, warnings) of a corpus file, as the loader reports them."""
    _, errors, warnings = check_spec_text(path.read_text(encoding="utf-8"), path.name, path.parent, ENVIRON)
    return errors, warnings


def unmatched(expected: list[Expected], problems) -> tuple[list[Expected], list]:
    """Expectations no problem satisfies, and problems no expectation names (one-to-one)."""
    left = list(problems)
    missing = []
    for want in expected:
        hit = next((p for p in left if (p.line, p.column, p.dotted_path) == (want.line, want.column, want.path)
                    and want.message in p.message), None)
        if hit is None:
            missing.append(want)
        else:
            left.remove(hit)
    return missing, left
