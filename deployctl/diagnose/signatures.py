"""Known error signatures (the table is data: deployctl/data/signatures.json) and the pure matcher that turns
collected text into hints: which signature, where (host, file in the bundle) and the line, and the fix."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

MAX_LINE = 400  # a matched line is shown up to this many characters


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    pattern: re.Pattern
    sources: frozenset[str]
    hint: str


@dataclass(frozen=True)
class Text:
    """One piece of collected text: its host, where it sits in the bundle, and what kind of text it is."""

    host: str
    source: str  # path in the host's folder (or a name such as `up error`)
    kind: str  # log | plog | dmesg | npu-smi | hccn-link | hccn-health | hccn-conf | inspect | error | ...
    text: str


@dataclass(frozen=True)
class Hint:
    id: str
    title: str
    host: str
    source: str
    line: str
    hint: str

    def to_json(self) -> dict:
        return {"id": self.id, "host": self.host, "source": self.source, "line": self.line, "hint": self.hint}


def parse_signatures(*texts: str) -> tuple[Signature, ...]:
    """The table from signatures.json texts, in order; a bad regex or a duplicate id is a ValueError naming it."""
    rows = [row for text in texts for row in json.loads(text)["signatures"]]
    seen: set[str] = set()
    out = []
    for row in rows:
        if row["id"] in seen:
            raise ValueError(f"signature {row['id']!r} is listed twice")
        seen.add(row["id"])
        try:
            pattern = re.compile(row["regex"], re.IGNORECASE | re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"signature {row['id']!r}: bad regex: {exc}") from None
        out.append(Signature(row["id"], row["title"], pattern, frozenset(row["sources"]), row["hint"]))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def signatures() -> tuple[Signature, ...]:
    """The generic table, then each flavour package's own (its `signatures.json`, in registry order)."""
    from importlib import resources

    from deployctl.servers.registry import FLAVOURS

    packages = dict.fromkeys(f.signatures for f in FLAVOURS.values() if f.signatures)
    return parse_signatures(*(resources.files(package).joinpath(name).read_text(encoding="utf-8")
                              for package, name in [("deployctl", "data/signatures.json")]
                              + [(package, "signatures.json") for package in packages]))


def match(texts: Iterable[Text], table: Optional[tuple[Signature, ...]] = None) -> list[Hint]:
    """Every signature found, once per (signature, host, source) with its first matching line; each line counts
    for the first signature (in table order) that matches it. Ordered by the table, then host, then source."""
    table = signatures() if table is None else table
    rank = {s.id: n for n, s in enumerate(table)}
    found: dict[tuple[str, str, str], Hint] = {}
    for text in texts:
        for signature, line in matched_lines(text, table):
            key = (signature.id, text.host, text.source)
            if key not in found:
                found[key] = Hint(signature.id, signature.title, text.host, text.source, _shown(line), signature.hint)
    return sorted(found.values(), key=lambda h: (rank[h.id], h.host, h.source))


def matched_lines(text: Text, table: Optional[tuple[Signature, ...]] = None) -> Iterator[tuple[Signature, str]]:
    """Each line of `text` that a signature for its kind matches, with the first such signature (table order)."""
    table = signatures() if table is None else table
    candidates = [s for s in table if text.kind in s.sources]
    if not candidates:
        return
    for line in text.text.splitlines():
        for signature in candidates:
            if signature.pattern.search(line):
                yield signature, line
                break


def top_hints(hints: list[Hint], count: int = 3) -> list[Hint]:
    """The first hints of distinct signatures: the same fault seen on every host is said once at the top."""
    out, ids = [], set()
    for hint in hints:
        if hint.id not in ids:
            ids.add(hint.id)
            out.append(hint)
        if len(out) == count:
            break
    return out


def _shown(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"
