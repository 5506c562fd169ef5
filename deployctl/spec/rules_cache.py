"""Rules of `cache:` (the servers' compile caches), each said at its own path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem
from deployctl.spec.paths import inside
from deployctl.spec.show import quoted

if TYPE_CHECKING:
    from deployctl.spec.rules import Context


def check_cache(c: "Context") -> Iterator[Problem]:
    """cache.dir (a host path the schema checks: format host-path) is not the weights' directory, which is mounted
    read-only and whose files `weights sync` verifies one by one (a server with no known compile caches says so
    through its unsupported features: rules.py check_features)."""
    where = c.value(("cache", "dir"), str)
    dest = c.value(("weights", "dest"), str)
    if where is not None and dest is not None and (inside(where, dest) or inside(dest, where)):
        yield Problem(("cache", "dir"), f"{quoted(where)} overlaps weights.dest {quoted(dest)}: the weights are "
                                        "mounted read-only and verified file by file",
                      hint="keep the caches in a directory of their own, e.g. /var/cache/deployctl/compile")
