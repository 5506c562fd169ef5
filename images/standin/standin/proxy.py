"""vllm-ascend's load-balancing P/D proxy (examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py):
same argv. At start it asks every listed backend for /standin/info and refuses lists the real deployment would
break on; then each request is prefilled on one prefiller (max_tokens 1, do_remote_decode) and decoded, with the
returned kv_transfer_params, on one decoder, both round robin. The lists change at run time through
POST /instances/add|remove where the release played has them (standin/proxy_pool.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from standin.app import listen, log
from standin.main import serve_until_stopped
from standin.config import Refusal
from standin.generation import ApiError
from standin.drain import Connections, StopPolicy
from standin.httpio import BadRequest, Request, json_response, response_bytes
from standin.proxy_pool import AdjustError, Member, Pools, rules_for
from standin.scheduler import answer_failure, relay
from standin.trace import TraceLog
from standin.upstream import Upstream
from standin.versions import VersionError, emulated

POLL_S = 0.2
DEFAULT_WAIT_S = 30.0
GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
ADJUST_PATHS = {"/instances/add": "add", "/instances/remove": "remove"}
CHECK_TIMEOUT_S = 5.0  # the listener's httpx timeout (v0.23.0 :603)
ROLES = (("prefiller", "kv_producer", "prefill"), ("decoder", "kv_consumer", "decode"))


@dataclass(frozen=True)
class ProxyArgs:
    host: str
    port: int
    prefillers: Tuple[Tuple[str, int], ...]
    decoders: Tuple[Tuple[str, int], ...]
    max_waiting_retries: int = 3  # the node listener's flags (v0.13.0 :464-472, v0.23.0 :654-662)
    waiting_retry_interval: float = 10.0


def parse_proxy_args(argv: Sequence[str]) -> ProxyArgs:
    """The example's argparse: --host, --port, --prefiller-hosts/-ports and --decoder-hosts/-ports (nargs +)."""
    lists: Dict[str, List[str]] = {"--host": [], "--port": []}
    current = None
    for word in argv:
        flag, eq, inline = word.partition("=")
        if word.startswith("--"):
            current = flag.replace("_", "-")
            lists.setdefault(current, [])
            if eq:
                lists[current].append(inline)
        elif current is not None:
            lists[current].append(word)
    problems = []
    ports: Dict[str, List[int]] = {}
    for flag in ("--port", "--prefiller-ports", "--decoder-ports", "--max-waiting-retries"):
        try:
            ports[flag] = [int(p) for p in lists.get(flag, [])]
        except ValueError:
            problems.append(f"{flag}: {' '.join(lists[flag])!r} are not port numbers")
    pairs = {}
    for name, _, _ in ROLES:
        hosts, numbers = lists.get(f"--{name}-hosts", []), ports.get(f"--{name}-ports", [])
        if not hosts:
            problems.append(f"--{name}-hosts: none given")
        elif len(hosts) != len(numbers):
            problems.append(f"{len(hosts)} --{name}-hosts but {len(numbers)} --{name}-ports")
        pairs[name] = tuple(zip(hosts, numbers))
    listed = [p for name, _, _ in ROLES for p in pairs[name]]
    twice = sorted({f"{h}:{p}" for h, p in listed if listed.count((h, p)) > 1})
    if twice:
        problems.append("listed twice: " + ", ".join(twice))
    interval = lists.get("--waiting-retry-interval") or ["10"]
    try:
        waiting_retry_interval = float(interval[-1])
    except ValueError:
        problems.append(f"--waiting-retry-interval: {interval[-1]!r} is not a number")
    if problems:
        raise Refusal("; ".join(problems))
    retries = ports.get("--max-waiting-retries") or [3]
    port = ports["--port"][-1] if ports.get("--port") else 8000
    host = lists["--host"][-1] if lists["--host"] else "localhost"
    return ProxyArgs(host, port, pairs["prefiller"], pairs["decoder"], retries[-1], waiting_retry_interval)


async def fetch_info(host: str, port: int, deadline: float) -> Optional[dict]:
    """The backend's /standin/info, polling until it answers or the deadline passes (then None)."""
    loop = asyncio.get_running_loop()
    upstream = Upstream(host, port)
    while True:
        try:
            response = await upstream.request("GET", "/standin/info")
            data = await response.read()
            if response.status == 200:
                upstream.close()
                return json.loads(data)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, BadRequest, ValueError):
            pass
        if loop.time() + POLL_S > deadline:
            upstream.close()
            return None
        await asyncio.sleep(POLL_S)


def backend_problems(prefill: Sequence[Tuple[str, dict]], decode: Sequence[Tuple[str, dict]]) -> List[str]:
    """Roles, rank coverage per engine and connector sizes of the listed backends (name, info) (pure)."""
    problems = []
    for (name, kv_role, _), infos in zip(ROLES, (prefill, decode)):
        for where, info in infos:
            if info.get("kv_role") != kv_role:
                problems.append(f"{name} {where} is not a {kv_role} (its kv_role: {info.get('kv_role')})")
    engines: Dict[str, List[Tuple[str, dict]]] = {}
    for where, info in list(prefill) + list(decode):
        engines.setdefault(str(info.get("engine_id")), []).append((where, info))
    for engine, members in engines.items():
        dp = members[0][1].get("dp")
        fronted: Dict[int, str] = {}
        for where, info in members:
            for rank in info.get("dp_ranks") or []:
                if rank in fronted:
                    problems.append(f"engine {engine}: dp rank {rank} is served by both {fronted[rank]} and {where}")
                fronted.setdefault(rank, where)
        missing = [r for r in range(dp or 0) if r not in fronted]
        if missing:
            problems.append(f"engine {engine}: dp rank(s) {','.join(map(str, missing))} of dp={dp} not listed "
                            f"(listed: {', '.join(w for w, _ in members)})")
    for infos, own_side, other_side, others in ((prefill, "prefill", "decode", decode),
                                                (decode, "decode", "prefill", prefill)):
        real = sorted({(i.get("dp"), i.get("tp")) for _, i in others})
        said = {}
        for where, info in infos:
            sizes = (info.get("kv_connector_extra_config") or {}).get(other_side) or {}
            said.setdefault((sizes.get("dp_size"), sizes.get("tp_size")), where)
        for (dp, tp), where in sorted(said.items(), key=str):
            wrong = [pair for pair in real if pair != (dp, tp)]
            if wrong:
                problems.append(f"{own_side} {where}'s kv_connector_extra_config says {other_side} dp_size {dp}, "
                                f"tp_size {tp} but the listed {other_side} servers run "
                                + ", ".join(f"dp {d} tp {t}" for d, t in wrong))
    return problems


class ProxyApp:
    def __init__(self, pools: Pools) -> None:
        self.pools = pools
        self.trace = TraceLog()
        self._count = 0
        self.connections = Connections()

    @property
    def prefill(self) -> List[Upstream]:
        return [m.backend for m in self.pools.members["prefill"]]

    @property
    def decode(self) -> List[Upstream]:
        return [m.backend for m in self.pools.members["decode"]]

    async def serve_connection(self, reader, writer) -> None:
        await self.connections.serve(reader, writer, self.handle, "detail")

    async def handle(self, req: Request, writer: asyncio.StreamWriter) -> None:
        if req.path == "/healthcheck" and req.method == "GET":
            writer.write(json_response(200, self.pools.healthcheck(), req.keep_alive))
        elif req.path == "/v1/models" and req.method == "GET":
            await self._models(req, writer)
            return
        elif req.path in GENERATION_PATHS and req.method == "POST":
            await self._forward(req, writer)
            return
        elif req.path in ADJUST_PATHS and req.method == "POST" and self.pools.rules.instances_api:
            writer.write(await self._adjust(ADJUST_PATHS[req.path], req))
        elif req.path == "/standin/trace" and req.method == "GET":
            writer.write(json_response(200, self.trace.as_json(), req.keep_alive))
        else:
            writer.write(json_response(404, {"detail": "Not Found"}, req.keep_alive))
        await writer.drain()

    async def _adjust(self, mode: str, req: Request) -> bytes:
        """POST /instances/add|remove: 200 with the handler's JSON; a body it cannot read makes the upstream handler
        raise, which FastAPI answers 500 with a plain-text body."""
        try:
            answer = await self.pools.adjust(mode, json.loads(req.body))
        except (ValueError, AdjustError) as exc:
            log(f"proxy: failed to {mode} instances: {exc}")
            return response_bytes(500, b"Internal Server Error", req.keep_alive, "text/plain; charset=utf-8")
        log(f"proxy: {mode}: {answer.get('message') or answer.get('error')} "
            f"prefill={answer.get('current_prefill_instances')} decode={answer.get('current_decode_instances')}")
        return json_response(200, answer, req.keep_alive)

    async def _models(self, req: Request, writer) -> None:
        if not self.decode:
            writer.write(response_bytes(500, b"Internal Server Error", req.keep_alive, "text/plain; charset=utf-8"))
            await writer.drain()
            return
        backend = self.decode[0]
        try:
            response = await backend.request("GET", "/v1/models")
            data = await response.read()
        except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
            writer.write(json_response(502, ApiError(502, f"decoder {backend.name} failed: {exc}",
                                                     "BadGatewayError").body(), req.keep_alive))
        else:
            writer.write(response_bytes(response.status, data, req.keep_alive,
                                        response.headers.get("content-type", "application/json")))
        await writer.drain()

    def _pick(self, role: str) -> Member:
        member = self.pools.pick(role)
        if member is None:  # upstream: RuntimeError("No available ... servers"), a 500
            raise ApiError(500, f"No available {role} servers", "InternalServerError")
        return member

    async def _forward(self, req: Request, writer: asyncio.StreamWriter) -> None:
        """Count the request as the release does while it runs (Pools.request_num gates removals)."""
        pools = self.pools
        pools.request_num += 1
        counted = True
        try:
            async for _ in self._forward_steps(req, writer):
                # v0.18.0's handler returns its StreamingResponse once prefill is done and its `finally` uncounts
                # the request (:712, :829) before the decoder streams; from #9645 it counts until the stream ends
                if not pools.rules.shared_scheduler:
                    pools.request_num -= 1
                    counted = False
        finally:
            if counted:
                pools.request_num -= 1

    async def _forward_steps(self, req: Request, writer: asyncio.StreamWriter):
        """Prefill, then decode; yields once between the decoder's answer head and relaying its body."""
        self._count += 1
        rid = req.headers.get("x-request-id") or f"proxy-{os.getpid()}-{self._count}"
        record = self.trace.start(rid, req.path, "proxy", req.arrival_ns)
        extra = (("x-request-id", rid),)
        decode_member: Optional[Member] = None
        try:
            try:
                body = json.loads(req.body)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                raise ApiError(400, f"request body is not a JSON object: {exc}", "BadRequestError") from None
            record.stream = bool(body.get("stream"))
            # the decoder is picked once the prefill answered (v0.18.0 :659-696, v0.23.0 :896-946)
            prefill_member = self._pick("prefill")
            prefill = prefill_member.backend
            record.backends = [prefill.name]
            try:
                params = await self._prefill(prefill, req.path, body, extra)
            finally:
                self.pools.release("prefill", prefill_member)
            decode_member = self._pick("decode")
            decode = decode_member.backend
            record.backends = [prefill.name, decode.name]
            log(f"proxy {rid} {req.path} prefill={prefill.name} decode={decode.name} stream={record.stream}")
            try:
                response = await decode.request("POST", req.path, _json({**body, "kv_transfer_params": params}),
                                                extra)
            except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
                raise ApiError(502, f"decoder {decode.name} failed: {exc}", "BadGatewayError") from None
        except BaseException as exc:
            if decode_member is not None:
                self.pools.release("decode", decode_member)
            if not isinstance(exc, ApiError):
                raise
            await answer_failure(exc, req, writer, extra, record, f"proxy {rid}")
            return
        yield
        try:
            await relay(response, req, writer, extra, record, f"decoder {decode.name}", rid)
        except (ConnectionError, asyncio.IncompleteReadError):
            if record.end_ns is None:
                record.aborted = True
                record.finish(499)
            raise
        finally:
            self.pools.release("decode", decode_member)

    async def _prefill(self, prefill: Upstream, path: str, body: dict, extra) -> dict:
        prefill_body = {k: v for k, v in body.items() if k != "stream_options"}
        prefill_body.update(max_tokens=1, stream=False, kv_transfer_params={
            "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None})
        if "max_completion_tokens" in body:
            prefill_body["max_completion_tokens"] = 1
        try:
            answer = await prefill.request("POST", path, _json(prefill_body), extra)
            data = await answer.read()
        except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
            raise ApiError(502, f"prefiller {prefill.name} failed: {exc}", "BadGatewayError") from None
        if answer.status != 200:
            raise ApiError(answer.status if answer.status < 500 else 502,
                           f"prefiller {prefill.name} answered {answer.status}: "
                           f"{data[:300].decode('utf-8', 'replace')}", "BadGatewayError")
        try:
            params = json.loads(data).get("kv_transfer_params")
        except (ValueError, AttributeError):
            params = None
        if not isinstance(params, dict):
            raise ApiError(502, f"prefiller {prefill.name} answered without kv_transfer_params", "BadGatewayError")
        return params


def _json(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _wait_s() -> float:
    text = os.environ.get("STANDIN_PROXY_WAIT_S", "")
    try:
        return float(text) if text else DEFAULT_WAIT_S
    except ValueError:
        raise Refusal(f"STANDIN_PROXY_WAIT_S={text!r} is not a number") from None


async def serves_models(host: str, port: int) -> bool:
    """The node listener's check of an instance being added: GET /v1/models answers 200 (v0.23.0 :598-608)."""
    upstream = Upstream(host, port)
    try:
        response = await asyncio.wait_for(upstream.request("GET", "/v1/models"), CHECK_TIMEOUT_S)
        await asyncio.wait_for(response.read(), CHECK_TIMEOUT_S)
        return response.status == 200
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, BadRequest):
        return False
    finally:
        upstream.close()


async def _start(args: ProxyArgs, wait_s: float, release: str) -> Optional[ProxyApp]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    listed = [(name, h, p) for (name, _, _), pairs in zip(ROLES, (args.prefillers, args.decoders))
              for h, p in pairs]
    infos = await asyncio.gather(*(fetch_info(h, p, deadline) for _, h, p in listed))
    silent = [f"{name} {h}:{p}" for (name, h, p), info in zip(listed, infos) if info is None]
    if silent:
        raise Refusal(f"no answer to /standin/info within {wait_s:g} s (STANDIN_PROXY_WAIT_S) from "
                      + ", ".join(silent))
    named = [(f"{h}:{p}", info) for (_, h, p), info in zip(listed, infos)]
    problems = backend_problems(named[:len(args.prefillers)], named[len(args.prefillers):])
    if problems:
        raise Refusal("; ".join(problems))
    pools = Pools(rules_for(release), Upstream, serves_models, args.max_waiting_retries)
    pools.seed("prefill", args.prefillers)
    pools.seed("decode", args.decoders)
    return ProxyApp(pools)


async def _run(args: ProxyArgs, wait_s: float, release: str) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        try:
            app = await _start(args, wait_s, release)
        except Refusal as exc:
            print(f"standin: refusing to start: {exc}", flush=True)
            return 1
        log("proxy backends checked: prefillers " + ", ".join(f"{h}:{p}" for h, p in args.prefillers)
            + "; decoders " + ", ".join(f"{h}:{p}" for h, p in args.decoders))
        server = await listen(app.serve_connection, args.host, args.port)
        if server is None:
            return 1
        log(f"startup complete: proxy serving on http://{args.host}:{args.port}")
        listener = None
        if app.pools.rules.instances_api:  # the NodeListener thread starts with the proxy state
            listener = asyncio.ensure_future(app.pools.listen(args.waiting_retry_interval))
        try:
            # uvicorn.run(app) (v0.23.0 :1203-1212): uvicorn's own signal handlers, so a second signal forces
            await serve_until_stopped(server, app, StopPolicy("uvicorn", second_signal_forces=True))
        finally:
            if listener is not None:
                listener.cancel()
    except asyncio.CancelledError:
        pass
    log("shutting down")
    return 0


def main(argv) -> int:
    try:
        args = parse_proxy_args(argv)
        wait_s = _wait_s()
        release = emulated(os.environ).release.name  # the image's release: its proxy example's behaviour
    except (Refusal, VersionError) as exc:
        print(f"standin: refusing to start: {exc}", flush=True)
        return 1
    try:
        return asyncio.run(_run(args, wait_s, release))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
