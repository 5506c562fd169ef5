"""Line-level readers shared by the fact parsers: `KEY=VALUE` and `Key : value` blocks, numbers."""

from __future__ import annotations

from deployctl.errors import FactParseError


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines with their 1-based line numbers, trailing whitespace and CR removed."""
    return [(number, line.rstrip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def first_line(text: str) -> tuple[int, str]:
    """The first non-blank line (or (1, "") for empty output), for error messages."""
    lines = numbered_lines(text)
    return lines[0] if lines else (1, "")


def key_values(text: str, tool: str, *, separator: str, comment: str | None = None) -> list[tuple[int, str, str]]:
    """Every `KEY<sep>VALUE` line as (line_no, key, value), keys and values stripped; else FactParseError."""
    out = []
    for number, line in numbered_lines(text):
        if comment and line.lstrip().startswith(comment):
            continue
        key, found, value = line.partition(separator)
        if not found or not key.strip():
            raise FactParseError(tool, number, line, f"'KEY{separator}VALUE'")
        out.append((number, key.strip(), value.strip()))
    return out


def to_int(value: str, tool: str, line_no: int, line: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise FactParseError(tool, line_no, line, f"{what} as an integer") from None
