"""An incremental HTTP/1.1 response parser with Server-Sent Events splitting (pure: bytes in, events out).

The client feeds it whatever a socket read returned; it never waits for more than it needs, so the caller can
stamp the arrival time of the bytes that carried each event.
"""

from __future__ import annotations

from typing import Optional

_HEAD, _SIZE, _DATA, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(7)
MAX_HEAD = 64 * 1024


class ProtocolError(Exception):
    """The peer sent something that is not an HTTP/1.1 response."""


class ResponseParser:
    """One response: `feed()` returns the SSE `data:` payloads completed by these bytes; `done` when it ended."""

    def __init__(self) -> None:
        self.status: Optional[int] = None
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.is_stream = False
        self.done = False
        self.body = bytearray()  # the raw body when it is not an event stream (error documents)
        self._buf = b""
        self._state = _HEAD
        self._remaining = 0
        self._sse = b""

    def feed(self, data: bytes) -> list[bytes]:
        events: list[bytes] = []
        buf = self._buf + data if self._buf else data
        pos = 0
        while not self.done:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if len(buf) - pos > MAX_HEAD:
                        raise ProtocolError("response head too large")
                    break
                self._parse_head(buf[pos:end])
                pos = end + 4
            elif state == _SIZE:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                try:
                    size = int(buf[pos:end].split(b";", 1)[0].strip() or b"0", 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size line {buf[pos:end][:40]!r}") from None
                pos = end + 2
                if size == 0:
                    self._state = _TRAILER
                else:
                    self._remaining = size
                    self._state = _DATA
            elif state == _DATA:
                take = min(self._remaining, len(buf) - pos)
                if take <= 0:
                    break
                self._body(buf[pos:pos + take], events)
                pos += take
                self._remaining -= take
                if self._remaining:
                    break
                if len(buf) - pos < 2:
                    # The CRLF after a chunk may come in the next read; wait for it.
                    self._remaining = 0
                    self._state = _DATA_CRLF
                    continue
                pos += 2
                self._state = _SIZE
            elif state == _DATA_CRLF:
                if len(buf) - pos < 2:
                    break
                pos += 2
                self._state = _SIZE
            elif state == _TRAILER:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                line_empty = end == pos
                pos = end + 2
                if line_empty:
                    self._finish(events)
            elif state == _LENGTH:
                take = min(self._remaining, len(buf) - pos)
                if take > 0:
                    self._body(buf[pos:pos + take], events)
                    pos += take
                    self._remaining -= take
                if self._remaining == 0:
                    self._finish(events)
                break
            elif state == _UNTIL_CLOSE:
                if pos < len(buf):
                    self._body(buf[pos:], events)
                    pos = len(buf)
                break
        self._buf = buf[pos:] if pos < len(buf) else b""
        return events

    def eof(self) -> list[bytes]:
        """The connection closed: completes a body read until close, else the response is broken."""
        if self._state == _UNTIL_CLOSE and not self.done:
            events: list[bytes] = []
            self._finish(events)
            return events
        if not self.done:
            raise ProtocolError("connection closed before the response was complete")
        return []

    @property
    def leftover(self) -> bytes:
        """Bytes received after the end of this response (a well-behaved server sends none)."""
        return self._buf

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ProtocolError(f"malformed status line {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                self.headers[name.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self.keep_alive = connection != "close" if parts[0] == "HTTP/1.1" else connection == "keep-alive"
        self.is_stream = "text/event-stream" in self.headers.get("content-type", "")
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._state = _SIZE
        elif "content-length" in self.headers:
            try:
                self._remaining = int(self.headers["content-length"])
            except ValueError:
                raise ProtocolError("bad Content-Length") from None
            self._state = _LENGTH
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self._remaining = 0
            self._state = _LENGTH
        else:
            self.keep_alive = False
            self._state = _UNTIL_CLOSE

    def _body(self, data: bytes, events: list[bytes]) -> None:
        if not self.is_stream:
            self.body += data
            return
        sse = self._sse + data if self._sse else data
        if b"\r" in sse:
            sse = sse.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = sse.find(b"\n\n", start)
            if end < 0:
                break
            _event_data(sse[start:end], events)
            start = end + 2
        self._sse = sse[start:]

    def _finish(self, events: list[bytes]) -> None:
        if self._sse.strip():
            _event_data(self._sse, events)  # a last event without its blank line
        self._sse = b""
        self.done = True
        self._state = _DONE


_DATA_CRLF = 7


def _event_data(event: bytes, events: list[bytes]) -> None:
    """The data of one SSE event (its `data:` lines joined by newlines); comments and other fields ignored."""
    if event.startswith(b"data:") and b"\n" not in event:
        events.append(event[6:] if event[5:6] == b" " else event[5:])
        return
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            parts.append(line[6:] if line[5:6] == b" " else line[5:])
    if parts:
        events.append(b"\n".join(parts))
