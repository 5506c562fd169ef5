"""Reaching a host's SSH port: a TCP connect and the server's banner, each by a deadline and within 0.1 s of
Ctrl-C (a blocking connect() or read cannot be interrupted), with a message that names host and port."""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time


class ConnectFailure(Exception):
    """A connect attempt that failed for good (timed out, interrupted, unresolvable)."""

    transient = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Transient(ConnectFailure):
    """A connect failure worth another try while time is left (refused, reset, no route yet)."""

    transient = True


def host_port(address: str, port: int) -> str:
    """`addr:port`, with an IPv6 address in brackets, as every connection message names a host."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def seconds(value: float) -> str:
    return f"{value:g}"


def close_quietly(sock) -> None:
    try:
        sock.close()
    except Exception:  # closing a dead socket must never mask the real error
        pass


def tcp_connect(address: str, port: int, deadline: float, timeout: float, cancel: threading.Event):
    """A TCP connection by `deadline`, given up within 0.1 s of `cancel` (a blocking connect() cannot be)."""
    where = host_port(address, port)
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectFailure(f"cannot resolve {address}: {exc.strerror}") from None
    family, kind, proto, _, target = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    code = sock.connect_ex(target)
    while code in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
        left = _time_left(sock, where, deadline, cancel,
                          Transient(f"cannot connect to {where}: no answer within {seconds(timeout)} s"))
        if ready(sock, selectors.EVENT_WRITE, min(0.1, left)):
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code != 0:
        close_quietly(sock)
        reason = {errno.ECONNREFUSED: "connection refused", errno.EHOSTUNREACH: "host unreachable",
                  errno.ENETUNREACH: "network unreachable", errno.ECONNRESET: "connection reset",
                  errno.ETIMEDOUT: f"no answer within {seconds(timeout)} s"}.get(code, os.strerror(code))
        raise Transient(f"cannot connect to {where}: {reason}")
    sock.setblocking(True)
    return sock


def await_banner(sock, where: str, deadline: float, timeout: float, cancel: threading.Event) -> None:
    """Wait for the server's first byte: a host that accepts TCP and never speaks fails by the deadline."""
    while True:
        left = _time_left(sock, where, deadline, cancel, ConnectFailure(
            f"timed out waiting for the SSH banner from {where} after {seconds(timeout)} s"))
        if ready(sock, selectors.EVENT_READ, min(0.1, left)):
            try:
                first = sock.recv(1, socket.MSG_PEEK)
            except OSError as exc:
                close_quietly(sock)
                raise Transient(f"{where} closed the connection before the SSH banner: {exc.strerror}") from None
            if not first:
                close_quietly(sock)
                raise Transient(f"{where} closed the connection before sending the SSH banner")
            return


def ready(sock, event: int, timeout: float) -> bool:
    """Whether `sock` is ready for `event` within `timeout` seconds. A selector, not select(): select() refuses
    every descriptor past 1024, and a process that also runs a bench's load generator holds more."""
    with selectors.DefaultSelector() as waiter:
        waiter.register(sock, event)
        return bool(waiter.select(timeout))


def _time_left(sock, where: str, deadline: float, cancel: threading.Event, expired: ConnectFailure) -> float:
    """Seconds left before `deadline`; the socket closed and `expired` raised when none, or on Ctrl-C."""
    if cancel.is_set():
        close_quietly(sock)
        raise ConnectFailure(f"connecting to {where} was interrupted")
    left = deadline - time.monotonic()
    if left <= 0:
        close_quietly(sock)
        raise expired
    return left
