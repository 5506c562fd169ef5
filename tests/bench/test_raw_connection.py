"""The kernel-stamped connection reads each chunk as it comes: a first chunk is stamped on its own arrival, never
held back until more of the answer (a fuller buffer, a later chunk) arrives.

A loopback server writes the head and the first chunk, then writes the rest only once the client has stamped its
first token, so a read path that waits for more bytes than the first chunk's stamps it after the second write."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

from deployctl.bench import raw_connection
from deployctl.bench.client import BaseUrl
from deployctl.bench.pool import ConnectionPool

HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n")
DEADLOCK_GUARD_S = 60  # a read path that holds the first chunk back never lets the server go on; it goes on then


def chunked(doc) -> bytes:
    event = b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def token(text: str) -> bytes:
    return chunked({"choices": [{"index": 0, "text": text, "finish_reason": None}]})


def test_the_first_chunk_is_stamped_when_it_arrives_not_with_the_rest_of_the_answer(monkeypatch):
    first_seen = threading.Event()
    received = raw_connection.RawConnection._received

    def watched(self, data, now):
        exchange = self.exchange
        received(self, data, now)
        if exchange is not None and exchange.chunks:
            first_seen.set()

    monkeypatch.setattr(raw_connection.RawConnection, "_received", watched)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    later_writes: list[int] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = b""
            while b"\r\n\r\n" not in request or not request.endswith(b"}"):
                request += connection.recv(65536)
            # head and first token in one write, as vLLM's first chunk follows its head at once
            connection.sendall(HEAD + token("a"))
            first_seen.wait(DEADLOCK_GUARD_S)
            for text in ("b", "c"):
                later_writes.append(time.time_ns())  # before the write: its bytes arrive after this stamp
                connection.sendall(token(text))
            connection.sendall(chunked(b"[DONE]") + b"0\r\n\r\n")

    server = threading.Thread(target=serve, daemon=True)
    server.start()

    async def go():
        pool = ConnectionPool(BaseUrl.parse(f"http://127.0.0.1:{port}"))
        try:
            body = json.dumps({"model": "m", "prompt": "p", "stream": True}).encode()
            head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            return await pool.request(head + body, "r1", False)
        finally:
            pool.close()

    try:
        record = asyncio.run(go())
    finally:
        server.join(DEADLOCK_GUARD_S)
        listener.close()
    assert record.ok, record.error
    assert record.text == "abc" and len(record.chunk_ns) == 3
    assert first_seen.is_set()
    assert record.chunk_ns[0] < later_writes[0] <= record.chunk_ns[1] <= record.chunk_ns[2], (
        record.chunk_ns, later_writes)
