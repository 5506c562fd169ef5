"""Routes shared by every role; generation and health are delegated to the role's engine."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from typing import Optional, Tuple
from urllib.parse import parse_qs

from standin.config import Config
from standin.generation import ApiError, GenRequest, parse_request
from standin.httpio import Request, json_response, response_bytes, serve_keep_alive
from standin.kvcache import KvCache
from standin.metrics import CONTENT_TYPE, render
from standin.trace import TraceLog, TraceRecord

GENERATION_PATHS = {"/v1/completions": False, "/v1/chat/completions": True}
ROUTES = {
    "/health": ("GET",), "/v1/models": ("GET",), "/version": ("GET",), "/standin/info": ("GET",),
    "/standin/trace": ("GET", "DELETE"), "/v1/completions": ("POST",), "/v1/chat/completions": ("POST",),
    "/metrics": ("GET",),
}


class Engine:
    """What differs between an inference instance and the scheduler."""

    # (engine index, KV cache) of every engine behind this server, what /metrics shows; the scheduler has none
    caches: Tuple[Tuple[str, KvCache], ...] = ()

    async def healthy(self) -> bool:
        raise NotImplementedError

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def hang(self, gen: GenRequest) -> None:
        """A generation that never answers (STANDIN_HANG_AFTER_REQUESTS); instances hold a batch slot meanwhile."""
        await asyncio.Event().wait()


def log(line: str) -> None:
    print(f"standin: {line}", flush=True)


class App:
    def __init__(self, config: Config, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.trace = TraceLog()
        self.ready = not config.knobs.never_ready
        self._id_prefix = secrets.token_hex(4)
        self._count = 0
        self._generations = 0
        self._created = int(time.time())
        self.version = "0.0.0+standin"  # GET /version; vLLM answers its own version there

    def _next_id(self) -> str:
        self._count += 1
        return f"{self._id_prefix}{self._count:08x}"

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests one after the other on a keep-alive connection."""
        await serve_keep_alive(reader, writer, self.handle, "detail")

    async def handle(self, req: Request, writer: asyncio.StreamWriter) -> None:
        methods = ROUTES.get(req.path)
        if methods is None:
            writer.write(json_response(404, {"detail": "Not Found"}, req.keep_alive))
        elif req.method not in methods:
            writer.write(json_response(405, {"detail": "Method Not Allowed"}, req.keep_alive))
        elif req.path in GENERATION_PATHS:
            await self._generate(req, GENERATION_PATHS[req.path], writer)
            return
        elif req.path == "/health":
            ok = self.ready and await self.engine.healthy()
            writer.write(response_bytes(200 if ok else 503, b"", req.keep_alive))
        elif req.path == "/v1/models":
            writer.write(json_response(200, self._models(), req.keep_alive))
        elif req.path == "/metrics":
            writer.write(self._metrics(req.keep_alive))
        elif req.path == "/version":
            writer.write(json_response(200, {"version": self.version}, req.keep_alive))
        elif req.path == "/standin/info":
            writer.write(json_response(200, self.info(), req.keep_alive))
        elif req.method == "DELETE":
            writer.write(json_response(200, {"cleared": self.trace.clear()}, req.keep_alive))
        else:
            writer.write(json_response(200, self.trace.as_json(_query_value(req.query, "id")), req.keep_alive))
        await writer.drain()

    async def _generate(self, req: Request, chat: bool, writer: asyncio.StreamWriter) -> None:
        rid = req.headers.get("x-request-id") or self._next_id()
        record = self.trace.start(rid, req.path, self.config.role, req.arrival_ns)
        extra = (("x-request-id", rid),)
        try:
            if not self.ready:
                raise ApiError(503, "the engine is not ready (STANDIN_NEVER_READY)", "ServiceUnavailableError")
            try:
                body = json.loads(req.body)
            except ValueError as exc:
                raise ApiError(400, f"request body is not JSON: {exc}", "BadRequestError") from None
            knobs = self.config.knobs
            gen = parse_request(body, chat, self.config.args.served_names, self.config.max_model_len,
                                knobs.default_max_tokens, knobs.eos_after)
        except ApiError as exc:
            writer.write(json_response(exc.status, exc.body(), req.keep_alive, extra))
            await writer.drain()
            record.finish(exc.status)
            return
        record.stream = gen.stream
        record.prompt_tokens = gen.prompt_tokens
        record.completion_tokens = gen.completion_tokens
        if self.config.knobs.log_requests:
            log(f"request {rid} {req.path} prompt_tokens={gen.prompt_tokens} max_tokens={gen.max_tokens} "
                f"stream={gen.stream}")
        self._generations += 1
        if self.config.knobs.empty_answers:  # a decoder that fails behind the proxy: 200, nothing in it
            writer.write(response_bytes(200, b"", req.keep_alive, extra))
            await writer.drain()
            record.finish(200)
            return
        hang_after = self.config.knobs.hang_after_requests
        if hang_after is not None and self._generations > hang_after:
            # what an HCCL hang looks like from outside: /health still 200, the request never answers
            if self._generations == hang_after + 1:
                log(f"hanging every generation from now on (STANDIN_HANG_AFTER_REQUESTS={hang_after})")
            await self.engine.hang(gen)
        try:
            await self.engine.generate(req, body, gen, rid, record, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            if record.end_ns is None:  # 499: the client went away before the answer ended
                record.aborted = True
                record.finish(499)
            raise

    def _metrics(self, keep_alive: bool) -> bytes:
        caches = self.engine.caches
        if not caches:  # the scheduler relays; vLLM's metrics live on the instances behind it
            return json_response(404, {"detail": "Not Found"}, keep_alive)
        text = render(caches, self.config.args.served_names[0])
        return response_bytes(200, text, keep_alive, CONTENT_TYPE)

    def _models(self) -> dict:
        args = self.config.args
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": self._created, "owned_by": "vllm", "root": args.model,
             "parent": None, "max_model_len": self.config.max_model_len, "permission": []}
            for name in args.served_names]}

    def info(self) -> dict:
        """What the stand-in understood from its command line and environment (no values of other env vars)."""
        c = self.config
        layout = c.layout
        return {
            "role": c.role, "port": c.args.port, "host": c.args.host, "tp": c.args.tp,
            "served_model_name": c.args.served_names[0], "served_model_names": list(c.args.served_names),
            "model": c.args.model, "max_model_len": c.max_model_len, "max_num_seqs": c.args.max_num_seqs,
            "max_num_batched_tokens": c.args.max_num_batched_tokens, "quantization": c.args.quantization,
            "kv_cache_dtype": c.args.kv_cache_dtype,
            "node_ports": [b.port for b in layout.backends] if layout else None,
            "backends": [{"role": b.role, "server_ip": b.server_ip, "port": b.port,
                          "device_ids": list(b.device_ids)} for b in layout.backends] if layout else None,
            "ranktable_checks_passed": list(layout.checks_passed) if layout else [],
            "devices_seen": [int(d) for d in c.devices_seen],
            "env_names": list(c.env_names), "env": dict(c.env_shown),
            "ignored_args": list(c.args.ignored), "argv": list(c.args.argv),
            "ready": self.ready, "pid": os.getpid(),
        }


def _query_value(query: str, name: str) -> Optional[str]:
    values = parse_qs(query).get(name) if query else None
    return values[0] if values else None


async def listen(handler, host, port):
    """The HTTP server on host:port as vLLM's has it, or None after saying why it cannot listen."""
    try:
        return await asyncio.start_server(handler, host or None, port, backlog=2048, reuse_address=True)
    except OSError as exc:
        log(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}")
        return None
