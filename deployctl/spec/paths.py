"""The one path checker of a spec's host paths (pure): the schema's `format: host-path` refuses what no host or
`docker run --volume` can take, and every comparison of two paths (is one inside the other?) is made on their
normal forms, so `/data/x/../w` and `//data/w` are `/data/w`."""

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


PATH_MAX = 4096  # Linux's limits.h: a longer path is refused by every system call


def host_path_problem(path: str):
    """Why `path` cannot be a path on the hosts that deployctl may mount, or None: absolute, no control character
    (NUL ends a C string, a newline splits the shell's and Docker's lines), no ':' (`docker run --volume
    SOURCE:TARGET[:ro]` splits there: `/data/a:b` would mount `/data/a` at `b`), at most PATH_MAX bytes."""
    if not path.startswith("/"):
        return "is not an absolute path"
    bad = next((c for c in path if ord(c) < 32 or c == "\x7f"), None)
    if bad is not None:
        return f"contains the control character {bad!r}: a path on the hosts has none"
    if ":" in path:
        return "contains ':', which `docker run --volume SOURCE:TARGET` reads as a separator"
    if len(path.encode("utf-8", "surrogatepass")) > PATH_MAX:
        return f"is longer than {PATH_MAX} bytes (Linux's PATH_MAX)"
    return None
