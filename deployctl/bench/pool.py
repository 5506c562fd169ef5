"""Keep-alive connections to one base URL for the bench: opened on demand (plain HTTP kernel-stamped), pre-warmed,
reused; one request at a time per connection."""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
from typing import TYPE_CHECKING, Optional

from deployctl.bench.client import BaseUrl, StreamConnection, _now
from deployctl.bench.metrics import RequestRecord

if TYPE_CHECKING:
    from deployctl.bench.raw_connection import RawConnection


class ConnectionPool:
    """Keep-alive connections to one base URL, opened on demand and reused."""

    def __init__(self, base: BaseUrl, connect_timeout: float = 10.0) -> None:
        self.base = base
        self.connect_timeout = connect_timeout
        self.idle: list[StreamConnection] = []
        self._ssl = ssl_module.create_default_context() if base.scheme == "https" else None

    async def open(self) -> StreamConnection:
        loop = asyncio.get_running_loop()
        if self._ssl is None:
            return await asyncio.wait_for(self._open_raw(loop), self.connect_timeout)
        _, protocol = await asyncio.wait_for(
            loop.create_connection(StreamConnection, self.base.host, self.base.port, ssl=self._ssl),
            self.connect_timeout)
        return protocol

    async def _open_raw(self, loop) -> RawConnection:
        infos = await loop.getaddrinfo(self.base.host, self.base.port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        from deployctl.bench.raw_connection import RawConnection

        return RawConnection(sock, loop)

    async def prewarm(self, count: int) -> None:
        """Open connections ahead, so the measured requests are written on open connections.

        Each new connection first carries one cheap GET: a handshake alone completes in the kernel before the
        server has accepted the connection, and a burst of first requests would then wait for its accept loop.
        """
        missing = count - len(self.idle)
        if missing > 0:
            opened = await asyncio.gather(*(self._open_and_ping() for _ in range(missing)), return_exceptions=True)
            self.idle.extend(c for c in opened if isinstance(c, StreamConnection) and not c.closed)

    async def _open_and_ping(self) -> StreamConnection:
        connection = await self.open()
        future = asyncio.get_running_loop().create_future()
        head = f"GET {self.base.prefix}/v1/models HTTP/1.1\r\nHost: {self.base.authority}\r\n\r\n"
        connection.send(head.encode("latin-1"), "prewarm", False, future)
        await asyncio.wait_for(future, self.connect_timeout)
        return connection

    async def acquire(self) -> StreamConnection:
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed:
                return connection
        return await self.open()

    def release(self, connection: StreamConnection) -> None:
        if not connection.closed and connection.exchange is None:
            self.idle.append(connection)

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()

    async def request(self, data: bytes, request_id: str, chat: bool,
                      timeout: Optional[float] = None) -> RequestRecord:
        """Send one prepared request and wait for its whole answer; never raises for a failed request."""
        try:
            connection = await self.acquire()
        except (OSError, asyncio.TimeoutError) as exc:
            now = _now()
            return RequestRecord(request_id, False, now, now, error=f"cannot connect: {_reason(exc)}")
        future = asyncio.get_running_loop().create_future()
        connection.send(data, request_id, chat, future)
        try:
            record = await (asyncio.wait_for(future, timeout) if timeout else future)
        except asyncio.TimeoutError:
            connection.exchange = None
            connection.close()
            now = _now()
            return RequestRecord(request_id, False, now, now, error=f"no complete answer within {timeout:g} s")
        self.release(connection)
        return record


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    errno = getattr(exc, "errno", None)
    if errno:
        import os

        return os.strerror(errno)
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
