"""Bytes of a ranktable file -> a JSON object, or one clear RanktableError (never a traceback).

Pure: the caller reads at most MAX_BYTES + 1 bytes. The bounds keep hostile files cheap: a real ranktable
(1000 hosts, 16000 devices) is about 3 MiB and 6 levels deep.
"""

from __future__ import annotations

import json
from typing import Any

from deployctl.errors import RanktableError

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 32  # the checkers walk documents recursively; 32 levels is far beyond any ranktable

_KINDS = {list: "a JSON array", str: "a JSON string", int: "a JSON number", float: "a JSON number",
          bool: "a JSON boolean", type(None): "JSON null"}


def decode_document(data: bytes, name: str) -> dict[str, Any]:
    """The JSON object in `data` (a file's first MAX_BYTES + 1 bytes); RanktableError `NAME: why` otherwise."""
    if len(data) > MAX_BYTES:
        raise RanktableError(f"{name}: too large: over {MAX_BYTES // (1024 * 1024)} MiB (a ranktable is far smaller)")
    if b"\x00" in data:
        raise RanktableError(f"{name}: not JSON: contains NUL bytes (a binary file?)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RanktableError(f"{name}: not JSON: invalid UTF-8 at byte {exc.start}") from None
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise RanktableError(f"{name}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise RanktableError(f"{name}: not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # a duplicate key, NaN, or an integer longer than Python converts
        why = "a number too long to convert" if "integer string conversion" in str(exc) else str(exc)
        raise RanktableError(f"{name}: not JSON: {why}") from None
    if not isinstance(document, dict):
        raise RanktableError(f"{name}: {_KINDS.get(type(document), 'JSON')}, expected an object (a ranktable)")
    if _depth_exceeds(document, MAX_DEPTH):
        raise RanktableError(f"{name}: JSON nested too deeply (more than {MAX_DEPTH} levels)")
    return document


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {json.dumps(key)[:60]} in one object")
        out[key] = value
    return out


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a JSON number")


def _depth_exceeds(document: Any, limit: int) -> bool:
    """Iterative, so a deep document cannot exhaust the stack here."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
