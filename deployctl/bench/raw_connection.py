"""A plain-HTTP connection that reads its own socket with recvmsg() and SO_TIMESTAMPNS: each chunk is stamped
when the kernel received it, not when a busy event loop got round to it."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys

from deployctl.bench.client import StreamConnection, _Exchange, _now

# Linux: SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) asks the kernel to stamp each received packet (struct timespec).
_SO_TIMESTAMPNS = 35 if sys.platform.startswith("linux") else None
_ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_READ_SIZE = 256 * 1024


class RawConnection(StreamConnection):
    """A plain-HTTP connection on a non-blocking socket read with recvmsg(), stamped by the kernel."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.sock = sock
        self.loop = loop
        self._pending = b""
        self._stamped = False
        if _SO_TIMESTAMPNS is not None and _ANCILLARY:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._stamped = True
            except OSError:
                pass
        loop.add_reader(sock.fileno(), self._readable)

    def send(self, data: bytes, request_id: str, chat: bool, future: asyncio.Future) -> None:
        exchange = _Exchange(request_id, chat, future)
        self.exchange = exchange
        before = _now()  # before the bytes leave: the answer's kernel stamp can never precede it
        try:
            written = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            written = 0
        except OSError as exc:
            self._lost(f"broken connection: {exc.strerror or exc}")
            return
        if written < len(data):  # rare for a request: wait until the socket takes the rest
            self._pending = data[written:]
            self.loop.add_writer(self.sock.fileno(), self._writable)
            return
        exchange.sent_ns = before

    def _writable(self) -> None:
        before = _now()
        try:
            written = self.sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.loop.remove_writer(self.sock.fileno())
            self._lost(f"broken connection: {exc.strerror or exc}")
            return
        self._pending = self._pending[written:]
        if not self._pending:
            self.loop.remove_writer(self.sock.fileno())
            if self.exchange is not None:
                self.exchange.sent_ns = before

    def _readable(self) -> None:
        try:
            if self._stamped:
                data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, _ANCILLARY)
                now = _kernel_stamp(ancillary) or _now()
            else:
                data = self.sock.recv(_READ_SIZE)
                now = _now()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(f"broken connection: {exc.strerror or exc}")
            return
        if not data:
            self._lost(None)
            return
        self._received(data, now)

    def _lost(self, reason) -> None:
        if not self.closed:
            self._teardown()
            self.connection_lost(reason)

    def _teardown(self) -> None:
        self.closed = True
        self.loop.remove_reader(self.sock.fileno())
        if self._pending:
            self.loop.remove_writer(self.sock.fileno())
        self.sock.close()

    def close(self) -> None:
        if not self.closed:
            self._teardown()
            exchange = self.exchange
            if exchange is not None:
                self._fail(exchange, _now(), "connection closed")


def _kernel_stamp(ancillary) -> int:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
            if len(data) >= 16:
                seconds, nanos = struct.unpack("qq", data[:16])
            else:
                seconds, nanos = struct.unpack("ii", data[:8])
            return seconds * 1_000_000_000 + nanos
    return 0
