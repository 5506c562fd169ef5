"""How a message quotes a value from the spec: on one line, control characters escaped, long values cut."""

from __future__ import annotations

import json

LIMIT = 100  # characters of a value shown; a 1 MB string would otherwise fill the terminal


def quoted(value) -> str:
    """'text' for a string (repr: a newline shows as \\n), the YAML spelling for anything else."""
    if isinstance(value, str):
        return repr(value if len(value) <= LIMIT else value[:LIMIT]) + ("…" if len(value) > LIMIT else "")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= LIMIT else text[:LIMIT] + "…"


def control_character(text: str) -> str | None:
    """A person's name for the first C0 control character or DEL in `text`; None when there is none."""
    for char in text:
        if char < " " or char == "\x7f":
            return _NAMES.get(char, f"a control character (U+{ord(char):04X})")
    return None


_NAMES = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL byte", "\t": "a tab", "\x7f": "a DEL character"}
