"""The one fan-out: the same work on every host at once, each on its own thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, TypeVar

from deployctl.transport import Transport

T = TypeVar("T")


def on_hosts(transports: Mapping[str, Transport], work: Callable[[Transport], T]) -> dict[str, T]:
    """Run `work` on every host in parallel; a HostError propagates (the first one, after all finished)."""
    names = list(transports)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(64, len(names))) as pool:
        futures = {name: pool.submit(work, transports[name]) for name in names}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        raise errors[0]
    return {name: future.result() for name, future in futures.items()}
