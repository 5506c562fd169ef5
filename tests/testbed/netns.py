"""A second bed's own network: the test thread moves into it for the bed's tests and back out for the others.

Namespaces belong to a thread (setns(2), unshare(2)) and are inherited by what it starts (threads, processes), so the
bed's daemons, deployctl's SSH connections and a test's Prometheus all see the bed's bridge; the tests that look at
this machine's own addresses (tests/ranktable) keep seeing them."""

from __future__ import annotations

import ctypes
import os
import subprocess

from tests.testbed import layout

CLONE_NEWNET = 0x40000000  # linux/sched.h
_namespaces: dict[str, int] = {}  # "machine" and "bed": open descriptors of the two network namespaces


def _libc(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{name}: {os.strerror(error)}")


def enter_bed() -> None:
    """Move this thread into the bed's network namespace, made on first use (loopback up); the first bed has none."""
    if not layout.BED_ID:
        return
    if "bed" in _namespaces:
        _libc("setns", _namespaces["bed"], CLONE_NEWNET)
        return
    _namespaces["machine"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    _libc("unshare", CLONE_NEWNET)
    _namespaces["bed"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)


def leave_bed() -> None:
    """Back to the machine's network namespace (nothing to do before the bed's was made)."""
    if "machine" in _namespaces:
        _libc("setns", _namespaces["machine"], CLONE_NEWNET)
