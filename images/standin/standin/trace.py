"""Ground-truth timing records for benchmarks: one per generation request, kept in memory (bounded)."""

from __future__ import annotations

import array
import collections
import time
from typing import List, Optional

MAX_RECORDS = 100_000


class TraceRecord:
    """Wall-clock (time.time_ns) moments of one request: arrival, each content chunk written, the end."""

    __slots__ = ("id", "path", "role", "stream", "arrival_ns", "chunk_ns", "end_ns", "status",
                 "prompt_tokens", "completion_tokens", "aborted", "backends")

    def __init__(self, rid: str, path: str, role: str, arrival_ns: int) -> None:
        self.id = rid
        self.path = path
        self.role = role
        self.stream = False
        self.arrival_ns = arrival_ns
        self.chunk_ns = array.array("q")  # 8 bytes a chunk: 100k long streamed answers must fit in memory
        self.end_ns: Optional[int] = None
        self.status: Optional[int] = None
        self.prompt_tokens: Optional[int] = None
        self.completion_tokens: Optional[int] = None
        self.aborted = False
        self.backends: Optional[List[str]] = None  # scheduler only: the prefill and decode it used

    def chunk_written(self) -> None:
        self.chunk_ns.append(time.time_ns())

    def finish(self, status: int) -> None:
        self.status = status
        self.end_ns = time.time_ns()

    def as_json(self) -> dict:
        doc = {
            "id": self.id, "path": self.path, "role": self.role, "stream": self.stream, "status": self.status,
            "arrival_ns": self.arrival_ns, "first_chunk_ns": self.chunk_ns[0] if self.chunk_ns else None,
            "chunk_ns": self.chunk_ns.tolist(), "end_ns": self.end_ns, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "aborted": self.aborted,
        }
        if self.backends is not None:
            doc["backends"] = self.backends
        return doc


class TraceLog:
    """The newest MAX_RECORDS records; older ones fall off."""

    def __init__(self, limit: int = MAX_RECORDS) -> None:
        self._records: collections.deque = collections.deque(maxlen=limit)

    def start(self, rid: str, path: str, role: str, arrival_ns: int) -> TraceRecord:
        record = TraceRecord(rid, path, role, arrival_ns)
        self._records.append(record)
        return record

    def as_json(self, rid: Optional[str] = None) -> list:
        return [r.as_json() for r in self._records if rid is None or r.id == rid]

    def clear(self) -> int:
        count = len(self._records)
        self._records.clear()
        return count
