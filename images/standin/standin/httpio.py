"""Just enough HTTP/1.1 on asyncio streams: read one request, frame responses and chunks."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
           413: "Payload Too Large", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable"}
MAX_BODY = 64 * 1024 * 1024


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Dict[str, str]  # lower-case names
    body: bytes
    keep_alive: bool
    arrival_ns: int  # wall clock when the whole request had been read
    arrival_mono: float  # the event loop's clock at the same moment, for deadlines


async def iter_chunks(reader: asyncio.StreamReader):
    """Each chunk's payload of a Transfer-Encoding: chunked body as it arrives (trailers are dropped)."""
    while True:
        line = await reader.readuntil(b"\r\n")
        n = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if n == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return
        data = await reader.readexactly(n)
        await reader.readexactly(2)
        yield data


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """De-chunk a whole request body, refusing one over MAX_BODY."""
    parts, size = [], 0
    async for data in iter_chunks(reader):
        size += len(data)
        if size > MAX_BODY:
            raise BadRequest(413, "request body too large")
        parts.append(data)
    return b"".join(parts)


def parse_header_lines(lines) -> Dict[str, str]:
    """Header lines to a dict with lower-case names."""
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, "malformed header line")
        headers[name.strip().lower()] = value.strip()
    return headers


def parse_head(head: bytes) -> Tuple[str, str, str, str, Dict[str, str]]:
    """Request line and headers of one request head (without the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise BadRequest(400, "malformed request line") from None
    path, _, query = target.partition("?")
    return method, path, query, version, parse_header_lines(lines[1:])


def parse_status_head(head: bytes) -> Tuple[int, Dict[str, str]]:
    """Status code and headers of one response head (without the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise BadRequest(502, f"malformed status line {lines[0]!r}")
    return int(parts[1]), parse_header_lines(lines[1:])


async def read_request(reader: asyncio.StreamReader, loop) -> Optional[Request]:
    """The next request on a connection, or None when the client closed it cleanly."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest(400, "connection closed inside a request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "request head too large") from None
    method, path, query, version, headers = parse_head(head[:-4])
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise BadRequest(400, "bad Content-Length") from None
        if length > MAX_BODY:
            raise BadRequest(413, "request body too large")
        body = await reader.readexactly(length) if length else b""
    else:
        body = b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, path, query, headers, body, keep_alive, time.time_ns(), loop.time())


def head_bytes(status: int, keep_alive: bool, headers: Iterable[Tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    lines.append("connection: keep-alive" if keep_alive else "connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response_bytes(status: int, body: bytes, keep_alive: bool, content_type: Optional[str] = "application/json",
                   extra: Iterable[Tuple[str, str]] = ()) -> bytes:
    """A whole response with Content-Length (`content_type` None: no such header)."""
    headers = [*([("content-type", content_type)] if content_type else []), ("content-length", str(len(body))),
               *extra]
    return head_bytes(status, keep_alive, headers) + body


def json_response(status: int, doc, keep_alive: bool, extra: Iterable[Tuple[str, str]] = ()) -> bytes:
    return response_bytes(status, json.dumps(doc, separators=(",", ":")).encode("utf-8"), keep_alive,
                          extra=extra)


def stream_head(status: int, keep_alive: bool, extra: Iterable[Tuple[str, str]] = ()) -> bytes:
    """Head of a chunked Server-Sent Events response."""
    return head_bytes(status, keep_alive, [("content-type", "text/event-stream; charset=utf-8"),
                                           ("transfer-encoding", "chunked"), *extra])


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


async def serve_keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handle, error_key: str,
                           closing=lambda: False) -> None:
    """Requests one after the other on a keep-alive connection; `handle(req, writer)` answers each. Once `closing()`
    is true the connection closes after the response in progress (uvicorn's graceful shutdown)."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                req = await read_request(reader, loop)
            except BadRequest as exc:
                writer.write(json_response(exc.status, {error_key: str(exc)}, False))
                break
            if req is None:
                break
            await handle(req, writer)
            if not req.keep_alive or closing():
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the client went away; nothing to answer
    finally:
        writer.close()
