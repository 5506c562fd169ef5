"""Routes shared by every role; generation and health are delegated to the role's engine."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from typing import Optional, Tuple
from urllib.parse import parse_qs

from standin.config import Config
from standin.drain import DRAIN_ERROR, Connections
from standin.generation import ApiError, GenRequest, parse_request
from standin.httpio import Request, json_response, response_bytes
from standin.kvcache import KvCache
from standin.metrics import CONTENT_TYPE, CONTENT_TYPE_1, render
from standin.stall import CLIENT_MESSAGE, MODES, WATCHDOG_S, EngineDied, Stalls, death_line
from standin.trace import TraceLog, TraceRecord

GENERATION_PATHS = {"/v1/completions": False, "/v1/chat/completions": True}
ROUTES = {
    "/health": ("GET",), "/v1/models": ("GET",), "/version": ("GET",), "/standin/info": ("GET",),
    "/standin/trace": ("GET", "DELETE"), "/v1/completions": ("POST",), "/v1/chat/completions": ("POST",),
    "/metrics": ("GET",), "/standin/stall": ("GET", "POST", "DELETE"),
}


class Engine:
    """What differs between an inference instance and the scheduler."""

    # (engine index, KV cache) of every engine behind this server, what /metrics shows; the scheduler has none
    caches: Tuple[Tuple[str, KvCache], ...] = ()
    stalls: Optional[Stalls] = None  # the stall modes (standin/stall.py); None: it relays, nothing to stall

    async def healthy(self) -> bool:
        raise NotImplementedError

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


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
        self.nested_errors = False  # vLLM >= 0.10.1's {"error": {...}} bodies (standin/generation.py ApiError)
        self.fingerprint: Optional[str] = None  # set: vLLM 0.32's answer shapes, with this system_fingerprint
        self.connections = Connections()
        self.draining = False  # vLLM >= 0.18 stopping: new generation requests fail (standin/drain.py)
        self._frozen_metrics: Optional[bytes] = None  # what /metrics shows once the engine core died
        if engine.stalls is not None:
            engine.stalls.on_death = self._engine_died

    def _next_id(self) -> str:
        self._count += 1
        return f"{self._id_prefix}{self._count:08x}"

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests one after the other on a keep-alive connection."""
        await self.connections.serve(reader, writer, self.handle, "detail")

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
            dead = self.engine.stalls is not None and self.engine.stalls.dead  # check_health raises EngineDeadError
            ok = self.ready and not dead and await self.engine.healthy()
            # vLLM's `Response(status_code=...)`: no body and no content type (0.32.0
            # vllm/entrypoints/serve/instrumentator/health.py:22-33)
            writer.write(response_bytes(200 if ok else 503, b"", req.keep_alive, content_type=None))
        elif req.path == "/standin/stall":
            status, doc = self._stall(req)
            writer.write(json_response(status, doc, req.keep_alive))
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
                                knobs.default_max_tokens, knobs.eos_after, self.fingerprint)
            if self.draining:  # the tokenizer pool is shut down: vLLM's catch-all handler answers 500
                raise ApiError(500, DRAIN_ERROR, "InternalServerError")
        except ApiError as exc:
            writer.write(json_response(exc.status, exc.body(self.nested_errors), req.keep_alive, extra))
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
        stalls = self.engine.stalls
        dead_after = knobs.engine_dead_after_requests
        if stalls is not None and dead_after is not None and self._generations > dead_after:
            stalls.die()
        if stalls is not None and stalls.dead:  # AsyncLLM.add_request raises EngineDeadError: a 500, at once
            error = ApiError(500, CLIENT_MESSAGE, "InternalServerError")
            writer.write(json_response(500, error.body(self.nested_errors), req.keep_alive, extra))
            await writer.drain()
            record.finish(500)
            return
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
                if stalls is not None:
                    stalls.hang()
            if stalls is None:  # the scheduler has no engine to stall: the request itself never answers
                await asyncio.Event().wait()
        try:
            await self.engine.generate(req, body, gen, rid, record, writer)
        except EngineDied:
            if record.end_ns is None:  # not begun: one 500, as for a request arriving after the death
                error = ApiError(500, CLIENT_MESSAGE, "InternalServerError")
                writer.write(json_response(500, error.body(self.nested_errors), req.keep_alive, extra))
                await writer.drain()
                record.finish(500)
        except (ConnectionError, asyncio.IncompleteReadError):
            if record.end_ns is None:  # 499: the client went away before the answer ended
                record.aborted = True
                record.finish(499)
            raise

    def _metrics(self, keep_alive: bool) -> bytes:
        caches = self.engine.caches
        if not caches:  # the scheduler relays; vLLM's metrics live on the instances behind it
            return json_response(404, {"detail": "Not Found"}, keep_alive)
        text = self._frozen_metrics or render(caches, self.config.args.served_names[0], self._kv_consumer())
        # prometheus_client's CONTENT_TYPE_LATEST: 0.0.4 before its 1.0.0 text format (0.26.0, vLLM 0.32's)
        return response_bytes(200, text, keep_alive, CONTENT_TYPE_1 if self.fingerprint else CONTENT_TYPE)

    def _kv_consumer(self) -> bool:
        return getattr(self.engine, "kv_role", None) == "kv_consumer"

    def _stall(self, req: Request) -> Tuple[int, dict]:
        """The stand-in-only trigger of a stall mode on a running server (a test stalls one rank without
        restarting it): POST {"mode": "hang"|"engine-dead", "engine": "R"?}; DELETE ends a hang; GET says."""
        stalls = self.engine.stalls
        if stalls is None:
            return 404, {"detail": f"a {self.config.role} has no engine to stall"}
        if req.method == "POST":
            try:
                doc = json.loads(req.body or b"{}")
            except ValueError:
                doc = None
            mode = doc.get("mode") if isinstance(doc, dict) else None
            engine = doc.get("engine") if isinstance(doc, dict) else None
            if mode not in MODES or (engine is not None and str(engine) not in stalls.engines):
                return 400, {"detail": f"give mode {' or '.join(MODES)} and optionally an engine of "
                                       f"{sorted(stalls.engines)}"}
            if mode == "hang":
                hung = stalls.hang(None if engine is None else str(engine))
                log(f"hanging engine(s) {','.join(hung)} (POST /standin/stall)")
            else:
                stalls.die()
        elif req.method == "DELETE":
            stalls.resume()
            log("resuming every engine (DELETE /standin/stall)")
        return 200, stalls.describe()

    def _engine_died(self) -> None:
        """The engine core died: say it as vLLM does, freeze /metrics, and exit after the watchdog's period unless
        VLLM_KEEP_ALIVE_ON_ENGINE_DEATH keeps the API server up (standin/stall.py)."""
        print(death_line(self.version), flush=True)
        self._frozen_metrics = render(self.engine.caches, self.config.args.served_names[0], self._kv_consumer())
        if self.config.knobs.keep_alive_on_engine_death:
            return
        asyncio.get_running_loop().call_later(WATCHDOG_S, _watchdog_exit)

    def _models(self) -> dict:
        args = self.config.args
        # vLLM's ModelCard with its one default ModelPermission (0.32.0 vllm/entrypoints/serve/engine/protocol.py
        # :90-105, openai/models/serving.py)
        permission = {"id": f"modelperm-{self._id_prefix}{self._id_prefix}", "object": "model_permission",
                      "created": self._created, "allow_create_engine": False, "allow_sampling": True,
                      "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                      "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": self._created, "owned_by": "vllm", "root": args.model,
             "parent": None, "max_model_len": self.config.max_model_len, "permission": [permission]}
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


def _watchdog_exit() -> None:
    log("engine dead: the API server shuts down (watchdog; VLLM_KEEP_ALIVE_ON_ENGINE_DEATH unset)")
    sys.stdout.flush()
    os._exit(0)


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
