"""The one path checker of a spec's host paths (pure): every comparison of two paths (is one inside the other?)
is made on their normal forms, so `/data/x/../w` and `//data/w` are `/data/w`."""

from __future__ import annotations

import posixpath


def normal(path: str) -> str:
    """`.`, `..`, repeated and trailing `/` folded, as Linux resolves them (symbolic links aside): POSIX leaves a
    leading `//` to the system, and Linux reads it as `/`."""
    folded = posixpath.normpath(path)
    return "/" + folded.lstrip("/") if folded.startswith("//") else folded


def inside(path: str, parent: str) -> bool:
    """`path` is `parent` or below it, compared in their normal forms."""
    path, parent = normal(path), normal(parent)
    return path == parent or path.startswith(parent if parent.endswith("/") else parent + "/")
