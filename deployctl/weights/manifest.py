"""What each host holds versus what the source has: the per-host plan and the manifest digest (pure)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Optional

MANIFEST_NAME = ".deployctl-manifest.json"
PARTIAL_SUFFIX = ".deployctl-partial"


@dataclass(frozen=True)
class SourceObject:
    """One file of the source: key in the store (or relative path), path under dest, size, ETag."""

    key: str
    path: str
    size: int
    etag: str


@dataclass(frozen=True)
class HostState:
    """What one state query saw on a host: the manifest's files, every file's size under dest, free space."""

    manifest: Mapping[str, dict]
    sizes: Mapping[str, int]
    free_bytes: int
    free_path: str
    fetcher_digest: Optional[str] = None  # sha256 of the fetcher program already on the host
    source: Optional[str] = None  # the source the manifest was synced from (`weights.source`'s text)
    listed: Optional[str] = None  # when that source was listed (UTC, ISO 8601), if recorded
    damaged: str = ""  # what was wrong with the manifest (its unsound entries vouch for nothing: fetched again)


@dataclass(frozen=True)
class HostPlan:
    fetch: tuple[SourceObject, ...]
    remove: tuple[str, ...]  # paths this tool wrote that left the source
    bytes_needed: int  # still to download (resumable partial bytes deducted)

    @property
    def idle(self) -> bool:
        return not self.fetch and not self.remove


def plan_host(objects: tuple[SourceObject, ...], state: HostState) -> HostPlan:
    """Fetch what the manifest does not vouch for (size+ETag) or what is gone; remove our own stale files."""
    fetch = []
    needed = 0
    for obj in objects:
        entry = state.manifest.get(obj.path)
        current = (entry is not None and entry.get("size") == obj.size and entry.get("etag") == obj.etag
                   and state.sizes.get(obj.path) == obj.size)
        if current:
            continue
        fetch.append(obj)
        needed += max(0, obj.size - min(state.sizes.get(obj.path + PARTIAL_SUFFIX, 0), obj.size))
    wanted = {o.path for o in objects}
    remove = tuple(sorted(p for p in state.manifest if p not in wanted))
    return HostPlan(tuple(fetch), remove, needed)


def manifest_digest(files: Optional[Mapping[str, dict]]) -> Optional[str]:
    """sha256 over (path, size, content sha256) of every file, sorted: equal digests mean identical weights."""
    if not files:
        return None
    lines = "".join(f"{path}\t{entry['size']}\t{entry['sha256']}\n" for path, entry in sorted(files.items()))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def parse_manifest(text: str) -> dict:
    """The manifest's `files`, or {} when absent or unreadable (then everything is fetched again)."""
    return read_manifest(text)[0]


MAX_FILE_SIZE = 2 ** 63 - 1  # st_size's range: a larger size is no file's


def read_manifest(text: str) -> tuple[dict, str, dict]:
    """(sound files, what was damaged or "", the document): a manifest a sync wrote may have been damaged since
    (truncated, edited, NaN or huge sizes); an entry that cannot vouch for its file is left out, so the file is
    fetched again and the fetcher writes the manifest anew. No text: no manifest, nothing damaged."""
    if not text.strip():
        return {}, "", {}
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as error:
        return {}, f"{MANIFEST_NAME} is not JSON ({str(error)[:80]})", {}
    if not isinstance(doc, dict):
        return {}, f"{MANIFEST_NAME} is not a JSON object", {}
    files = doc.get("files", {})
    if not isinstance(files, dict):
        return {}, f"{MANIFEST_NAME}: files is not an object", doc
    sound, bad = {}, []
    for path, entry in files.items():
        why = _entry_problem(entry)
        if why:
            bad.append(f"{path!r}: {why}")
        else:
            sound[path] = entry
    damaged = (f"{MANIFEST_NAME}: {len(bad)} unsound entr{'y' if len(bad) == 1 else 'ies'} ({bad[0]}"
               + (", ..." if len(bad) > 1 else "") + ")") if bad else ""
    return sound, damaged, doc


def _entry_problem(entry) -> str:
    if not isinstance(entry, dict):
        return "not an object"
    size = entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_FILE_SIZE:
        return f"size {str(size)[:40]} is not a whole number of bytes"
    for key in ("etag", "sha256"):
        if not isinstance(entry.get(key), str):
            return f"{key} is not text"
    return ""
