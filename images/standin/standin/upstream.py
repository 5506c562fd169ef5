"""A keep-alive HTTP/1.1 client for the scheduler's backends (pooled connections, chunked bodies)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Dict, List, Tuple

from standin.httpio import iter_chunks, parse_status_head

CONNECT_TIMEOUT_S = 5.0


class Response:
    """Status and headers read; the body is read with read() or chunks(), which return the connection."""

    def __init__(self, upstream: "Upstream", status: int, headers: Dict[str, str],
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.upstream = upstream
        self.status = status
        self.headers = headers
        self._reader = reader
        self._writer = writer

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    def _reusable(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"

    async def read(self) -> bytes:
        if self.chunked:
            return b"".join([part async for part in self.chunks()])
        if "content-length" in self.headers:
            body = await self._reader.readexactly(int(self.headers["content-length"]))
            self._release(self._reusable())
            return body
        body = await self._reader.read()
        self._release(False)
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each chunk's payload as it arrives (a stand-in instance writes one SSE event per chunk)."""
        try:
            async for data in iter_chunks(self._reader):
                yield data
        except BaseException:
            self._release(False)
            raise
        self._release(self._reusable())

    def _release(self, reusable: bool) -> None:
        if reusable:
            self.upstream.idle.append((self._reader, self._writer))
        else:
            self._writer.close()


class Upstream:
    """One backend address; idle connections are reused so a benchmark does not pay a connect per request."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: List[Tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: Tuple[Tuple[str, str], ...] = ()) -> Response:
        head = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}", f"content-length: {len(body)}"]
        if body:
            head.append("content-type: application/json")
        head.extend(f"{k}: {v}" for k, v in headers)
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        while self.idle:
            reader, writer = self.idle.pop()
            try:
                return await self._exchange(reader, writer, data)
            except (ConnectionError, asyncio.IncompleteReadError):
                writer.close()  # the backend closed an idle connection (e.g. it restarted): try another
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT_S)
        try:
            return await self._exchange(reader, writer, data)
        except BaseException:
            writer.close()
            raise

    async def _exchange(self, reader, writer, data: bytes) -> Response:
        writer.write(data)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status, headers = parse_status_head(head[:-4])
        return Response(self, status, headers, reader, writer)

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

