"""A minimal streaming HTTP/1.1 client on asyncio protocols: one keep-alive connection (bench/pool.py reuses them).

Plain-HTTP connections read their socket themselves with recvmsg() and SO_TIMESTAMPNS (bench/raw_connection.py),
so a chunk's time is when the kernel received its bytes, not when a busy event loop got round to it (64 streams
answering at once would otherwise be stamped one callback apart). Where the kernel gives no stamp (HTTPS, other systems), the time
is taken on entry to the read callback, before any parsing. "sent" is stamped right before the request's last
bytes are handed to the socket of an open connection (an answer cannot be received before that moment). All stamps are wall-clock ns (the kernel's clock).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from deployctl.bench.http_parse import ProtocolError, ResponseParser
from deployctl.bench.metrics import RequestRecord

_now = time.time_ns


@dataclass(frozen=True)
class BaseUrl:
    """Where requests go: scheme, host, port and a path prefix (without the trailing slash)."""

    scheme: str
    host: str
    port: int
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> "BaseUrl":
        """`http(s)://host[:port][/prefix]`; anything else is a ValueError naming the URL and what is wrong
        (checked here, before a request line is built from it)."""
        odd = next((c for c in url if c.isspace() or not c.isprintable() or not c.isascii()), None)
        if odd is not None:
            raise ValueError(f"{url!r}: a base URL holds no spaces, control or non-ASCII characters "
                             f"(found {odd!r}; percent-encode it)")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise ValueError(f"{url}: a base URL has no ?query or #fragment (requests go to its path + /v1/...)")
        try:
            port = parts.port
        except ValueError as exc:  # urllib's message does not say which URL
            raise ValueError(f"{url}: {exc}") from None
        if port == 0:
            raise ValueError(f"{url}: port 0 is no port to connect to")
        return cls(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                   parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.prefix}"


def request_bytes(base: BaseUrl, path: str, body: dict, request_id: str) -> bytes:
    """A whole POST request, head and JSON body, ready to write."""
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    head = (f"POST {base.prefix}{path} HTTP/1.1\r\nHost: {base.authority}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\nX-Request-Id: {request_id}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    return head.encode("latin-1") + payload


FAILED_FINISH = ("abort", "error")


class _Exchange:
    """The state of the one request in flight on a connection."""

    __slots__ = ("request_id", "chat", "future", "parser", "sent_ns", "chunks", "texts", "usage", "error")

    def __init__(self, request_id: str, chat: bool, future: asyncio.Future) -> None:
        self.request_id = request_id
        self.chat = chat
        self.future = future
        self.parser = ResponseParser()
        self.sent_ns = 0
        self.chunks: list[int] = []
        self.texts: list[str] = []
        self.usage: Optional[dict] = None
        self.error = ""


class StreamConnection(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time (no pipelining)."""

    def __init__(self) -> None:
        self.transport: Optional[asyncio.Transport] = None
        self.exchange: Optional[_Exchange] = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, data: bytes, request_id: str, chat: bool, future: asyncio.Future) -> None:
        exchange = _Exchange(request_id, chat, future)
        self.exchange = exchange
        # stamped before the write: an answer on loopback can arrive (and be stamped by the kernel) before this
        # thread runs again, and a TTFT is never negative
        exchange.sent_ns = _now()
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self._received(data, _now())

    def _received(self, data: bytes, now: int) -> None:
        exchange = self.exchange
        if exchange is None:
            return  # bytes with no request in flight: the server misbehaves; the next request will see it
        try:
            events = exchange.parser.feed(data)
        except ProtocolError as exc:
            self._fail(exchange, now, f"protocol error: {exc}")
            self.close()
            return
        for payload in events:
            self._event(exchange, payload, now)
        if exchange.parser.done:
            self._complete(exchange, now)

    def _event(self, exchange: _Exchange, payload: bytes, now: int) -> None:
        if payload == b"[DONE]":
            return
        try:
            doc = json.loads(payload)
        except ValueError:
            exchange.error = exchange.error or "stream event is not JSON"
            return
        if not isinstance(doc, dict):
            return
        if "error" in doc or doc.get("object") == "error":
            error = doc.get("error", doc)
            message = error.get("message") if isinstance(error, dict) else str(error)
            exchange.error = exchange.error or f"error in stream: {message}"
            return
        choices = doc.get("choices")
        if choices:
            choice = choices[0]
            # vLLM ends a request it aborted (a server stopping under SIGTERM with --shutdown-timeout 0, the
            # default from 0.18: vllm #34730) with finish_reason "abort" in a 200 stream; "error" is a request-level
            # failure (vllm/v1/engine/__init__.py FinishReason). Neither is an answer.
            reason = choice.get("finish_reason")
            if reason in FAILED_FINISH:
                exchange.error = exchange.error or f"the server ended the request: finish_reason {reason}"
            if exchange.chat:
                delta = choice.get("delta") or {}
                text = delta.get("content")
                thinking = delta.get("reasoning") or delta.get("reasoning_content")
                # vLLM's chat stream opens with a chunk that names the role (content ""), sent with the first
                # token's (vllm/entrypoints/openai/chat_completion/serving.py `first_iteration`); it is no token
                token = not ("role" in delta and not text and not thinking)
            else:
                text, token = choice.get("text"), True
            # Every chunk with choices carries a generated token, its text empty or not, as vLLM's own benchmark
            # client counts them (vllm/benchmarks/lib/endpoint_request_func.py: "text could be empty here e.g.
            # for special tokens"; a byte of an unfinished UTF-8 character decodes to "" too). A reasoning
            # model's thinking streams in delta.reasoning (delta.reasoning_content before vLLM renamed it): its
            # first token is the first token, and an answer cut during thinking is an answer. Only the answer's
            # text is kept, as vLLM's client does.
            if token:
                exchange.chunks.append(now)
            if text:
                exchange.texts.append(text)
        usage = doc.get("usage")
        if usage:
            exchange.usage = usage

    def _complete(self, exchange: _Exchange, now: int) -> None:
        parser = exchange.parser
        status = parser.status
        self.exchange = None
        if not parser.keep_alive or parser.leftover:
            self.close()
        if status is None or not 200 <= status < 300:
            error = f"HTTP {status}" + _error_message(bytes(parser.body))
        elif not parser.is_stream:
            error = "answer is not an event stream"
        elif exchange.error:
            error = exchange.error
        elif not exchange.chunks:
            error = "stream ended without any token"
        else:
            error = ""
        self._resolve(exchange, now, error)

    def _fail(self, exchange: _Exchange, now: int, error: str) -> None:
        self.exchange = None
        self._resolve(exchange, now, error)

    @staticmethod
    def _resolve(exchange: _Exchange, now: int, error: str) -> None:
        if exchange.future.done():
            return
        usage = exchange.usage or {}
        exchange.future.set_result(RequestRecord(
            request_id=exchange.request_id, ok=not error, sent_ns=exchange.sent_ns or now, end_ns=now,
            chunk_ns=tuple(exchange.chunks), status=exchange.parser.status, error=error,
            text="".join(exchange.texts), usage_prompt_tokens=usage.get("prompt_tokens"),
            usage_completion_tokens=usage.get("completion_tokens")))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is not None:
            now = _now()
            try:
                for payload in exchange.parser.eof():
                    self._event(exchange, payload, now)
                self._complete(exchange, now)
            except ProtocolError as error:
                self._fail(exchange, now, f"broken stream: {error}")


def _error_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
        message = doc.get("message") or (doc.get("error") or {}).get("message") or doc.get("detail")
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", "replace").strip()
    return f": {message}" if message else ""
