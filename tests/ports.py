"""Ports for servers a test starts: distinct, and outside the kernel's ephemeral range, so no outgoing connection of
another process can take one between the check and the server's bind (a port the kernel picked for us can).
Under pytest-xdist each worker picks from its own blocks of ports, so two workers never pick the same one."""

from __future__ import annotations

import os
import random
import socket
from contextlib import ExitStack
from pathlib import Path


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


BLOCK = 64  # ports in a block; block b belongs to worker b mod the worker count


def _mine(port: int) -> bool:
    """The port lies in a block of this pytest-xdist worker (every port when not under xdist)."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return (port // BLOCK) % count == index


# Every port handed out in this process, never handed out again: two calls made before either port is bound (a
# server's API port, then its kv port) would otherwise get the same free port now and then (seen: 1 in a few
# thousand runs of a test that asks twice).
_HANDED_OUT: set[int] = set()


def free_ports(count: int = 1) -> tuple[int, ...]:
    """`count` distinct ports, each bindable on every address right now, below the ephemeral range, and never
    handed out before in this process."""
    low, _ = _ephemeral_range()
    candidates = [port for port in range(max(1024, low - 12000), low) if port not in _HANDED_OUT and _mine(port)]
    random.shuffle(candidates)
    with ExitStack() as held:  # held open together: the ports are distinct
        ports = []
        for port in candidates:
            sock = held.enter_context(socket.socket())
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            ports.append(port)
            if len(ports) == count:
                _HANDED_OUT.update(ports)
                return tuple(ports)
    raise RuntimeError(f"no {count} free ports below {low}")


def free_port() -> int:
    return free_ports(1)[0]


def free_run(count: int, floor: int = 1024) -> int:
    """A base port with `count` (at most BLOCK) consecutive ports from it free on every address, at or above
    `floor`, below the ephemeral range, in one block of this worker, none handed out before in this process."""
    low, _ = _ephemeral_range()
    for _ in range(2000):
        base = random.randrange(max(1024, floor, low - 12000), low - count)
        run = range(base, base + count)
        if _HANDED_OUT.intersection(run) or not _mine(base) or base // BLOCK != run[-1] // BLOCK:
            continue
        with ExitStack() as held:
            try:
                for port in run:
                    held.enter_context(socket.socket()).bind(("0.0.0.0", port))
            except OSError:
                continue
            _HANDED_OUT.update(run)
            return base
    raise RuntimeError(f"no {count} consecutive free ports")
