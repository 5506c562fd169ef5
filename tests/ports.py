"""Ports for servers a test starts: distinct, and outside the kernel's ephemeral range, so no outgoing connection of
another process can take one between the check and the server's bind (a port the kernel picked for us can)."""

from __future__ import annotations

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


def free_ports(count: int = 1) -> tuple[int, ...]:
    """`count` distinct ports, each bindable on every address right now and below the ephemeral range."""
    low, _ = _ephemeral_range()
    candidates = list(range(max(1024, low - 12000), low))
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
                return tuple(ports)
    raise RuntimeError(f"no {count} free ports below {low}")


def free_port() -> int:
    return free_ports(1)[0]
