"""SGLang 0.5.23's prefill/decode disaggregation as the test bed plays it (`--disaggregation-mode prefill|decode`).
What each behaviour follows (paths inside the 0.5.23 wheel):

- a P/D server refuses a generate request that carries no bootstrap_room with 400, unless the transfer backend is
  `fake` (managers/scheduler.py:3048-3064, "Invalid request: Disaggregated request received without bootstrap room
  id"), in the OpenAI error shape (entrypoints/openai/serving_base.py create_error_response);
- a prefill server starts a bootstrap server on --disaggregation-bootstrap-port (default 8998) whose routes include
  GET /health ("OK") and /route, where a decode's KV receiver asks for the prefill's ranks
  (disaggregation/common/conn.py `_setup_routes`, `_handle_route_get`);
- a decode server asks that bootstrap server (the request's bootstrap_host:bootstrap_port) before it generates,
  and waits for the prefill to have prefilled the request's room, at most SGLANG_DISAGGREGATION_WAITING_TIMEOUT
  (300 s, environ.py); a prefill it cannot reach fails the request.

The KV cache itself is not moved: the stand-in's prefill answers its first token and marks the room done on its
bootstrap server (GET /standin/kv?room=R waits for it, the stand-in's own route); the decode then generates the
whole answer as a mixed server would, so every pairing answers the same tokens."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import replace
from typing import Dict, Optional
from urllib.parse import parse_qs

from standin.app import listen, log
from standin.httpio import Request, json_response, read_request

MODES = ("null", "prefill", "decode")  # arg_groups/fields/disagg.py disaggregation_mode
BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")  # arg_groups/choices.py
DEFAULT_BOOTSTRAP_PORT = 8998  # disagg.py disaggregation_bootstrap_port
WAITING_TIMEOUT_S = float(os.environ.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300))
ROOM_KEEP_S = 600.0  # how long a prefilled room stays known to a decode that asks late


class PdError(Exception):
    """A request a P/D server fails: (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_body(status: int, message: str) -> dict:
    """SGLang's OpenAI ErrorResponse (entrypoints/openai/protocol.py:106-111)."""
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


class Disaggregation:
    """One server's P/D role: its rooms (prefill) or its way to its prefills (decode)."""

    def __init__(self, mode: str, backend: str, bootstrap_port: int, host: str) -> None:
        self.mode, self.backend, self.bootstrap_port, self.host = mode, backend, bootstrap_port, host
        self.rooms: Dict[int, asyncio.Event] = {}
        self.served: Dict[int, float] = {}

    @property
    def engine_type(self) -> str:
        """DisaggregationMode.to_engine_type (disaggregation/utils.py:156-161): metrics' engine_type label."""
        return {"null": "unified"}.get(self.mode, self.mode)

    def _room(self, room: int) -> asyncio.Event:
        now = time.monotonic()
        for old in [r for r, at in self.served.items() if now - at > ROOM_KEEP_S]:
            self.served.pop(old, None)
            self.rooms.pop(old, None)
        return self.rooms.setdefault(room, asyncio.Event())

    async def start(self) -> Optional[asyncio.AbstractServer]:
        """The prefill's bootstrap server (None for a decode); a port it cannot bind ends the server."""
        if self.mode != "prefill":
            return None
        server = await listen(self._serve_bootstrap, self.host, self.bootstrap_port)
        if server is None:
            raise OSError(f"cannot listen on the bootstrap port {self.bootstrap_port}")
        log(f"bootstrap server on port {self.bootstrap_port}")
        return server

    def request_for_role(self, req: Request) -> Request:
        """The request this server generates for, or PdError: without a room it refuses (unless `fake`); a prefill
        generates only the first token (its prefill) before the KV goes to the decode."""
        try:
            body = json.loads(req.body)
        except ValueError:
            return req  # the generation path says what is wrong with it
        if not isinstance(body, dict):
            return req
        if body.get("bootstrap_room") is None and self.backend != "fake":
            raise PdError(400, "Invalid request: Disaggregated request received without bootstrap room id. "
                               f"req.rid='{body.get('rid') or 'standin'}'")
        if self.mode == "prefill":
            body = dict(body, max_tokens=1)
            if "max_completion_tokens" in body:
                body["max_completion_tokens"] = 1
            return replace(req, body=json.dumps(body).encode())
        return req

    def prefilled(self, req: Request) -> None:
        """The prefill finished its part of this request: its room's KV is ready for the decode."""
        room = _room_of(req)
        if room is not None:
            self._room(room).set()
            self.served[room] = time.monotonic()

    async def fetch_kv(self, req: Request) -> None:
        """The decode's wait: the prefill's bootstrap server answers /route, then the room is prefilled;
        PdError when either fails."""
        body = json.loads(req.body) if req.body else {}
        room, host, port = body.get("bootstrap_room"), body.get("bootstrap_host"), body.get("bootstrap_port")
        if room is None or host is None:
            return  # the `fake` backend: nothing to fetch
        port = int(port or DEFAULT_BOOTSTRAP_PORT)
        status, _ = await _get(host, port, "/route", 10.0)
        if status != 200:
            raise PdError(500, f"KVTransferError(bootstrap_room={room}): Failed to get prefill server info from "
                               f"bootstrap server {host}:{port}")
        status, _ = await _get(host, port, f"/standin/kv?room={int(room)}", WAITING_TIMEOUT_S + 5)
        if status != 200:
            raise PdError(500, f"KVTransferError(bootstrap_room={room}): the prefill at {host}:{port} sent no KV "
                               f"within {WAITING_TIMEOUT_S:g} s")

    async def _serve_bootstrap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await read_request(reader, asyncio.get_running_loop())
            if req is None:
                return
            if req.path == "/health":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                             b"Connection: close\r\n\r\nOK")
            elif req.path == "/route":
                writer.write(json_response(200, {"rank_ip": self.host, "rank_port": self.bootstrap_port}, False))
            elif req.path == "/standin/kv":
                room = int(parse_qs(req.query).get("room", ["-1"])[0])
                try:
                    await asyncio.wait_for(self._room(room).wait(), WAITING_TIMEOUT_S)
                    writer.write(json_response(200, {"room": room}, False))
                except asyncio.TimeoutError:
                    writer.write(json_response(504, {"room": room}, False))
            else:
                writer.write(json_response(404, {"detail": "Not Found"}, False))
            await writer.drain()
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def _room_of(req: Request) -> Optional[int]:
    try:
        room = json.loads(req.body).get("bootstrap_room")
    except (ValueError, AttributeError):
        return None
    return int(room) if room is not None else None


async def _get(host: str, port: int, path: str, timeout: float) -> tuple:
    """(status, body) of a GET; status 0 when nothing answered within `timeout`."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10.0)
    except (OSError, asyncio.TimeoutError):
        return 0, b""
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
    except (OSError, asyncio.TimeoutError):
        return 0, b""
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), body
    except (IndexError, ValueError):
        return 0, b""
