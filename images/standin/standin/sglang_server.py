"""`python -m sglang.launch_server ...` (server sglang on GPU hosts, issue 43): SGLang 0.5.23's HTTP server as the
test bed plays it, on the stand-in's generation engine. Each behaviour follows SGLang's source (paths inside its
0.5.23 wheel):

- the command line: SGLang's own parser's options (standin/data/sglang_flags.json, written from that parser by
  tools/sglang_flags.py); any other option is argparse's `unrecognized arguments` and exit 2, as
  prepare_server_args (sglang/srt/server_args.py:668-700) does;
- GET /health and /health_generate (sglang/srt/entrypoints/http_server.py:721-795): 503 once SIGTERM came, else
  /health 200 at once (no generation without SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION, :739-743) and
  /health_generate 200 once the scheduler answered its one-token request: while the engine hangs (POST
  /standin/stall) nothing answers, and after HEALTH_CHECK_TIMEOUT (SGLANG_HEALTH_CHECK_TIMEOUT, default 20 s, :218)
  it is 503 (:782-795), /health staying 200;
- GET /metrics only with --enable-metrics (http_server.py:314-317), with the `sglang:` names of
  sglang/srt/observability/metrics_collector.py and its labels model_name and engine_type "unified"
  (tokenizer_metric_labels, :1804-1819; DisaggregationMode.to_engine_type, disaggregation/utils.py:156-161);
- SIGTERM (sglang/srt/managers/tokenizer_manager.py:4066-4070, sigterm_watchdog :3508-3550): /health turns 503,
  requests keep being served (generate_request never reads gracefully_exit), and every 5 s the watchdog looks at
  what is left in flight; once nothing is, the server exits. SGLang sets no limit of its own: `docker stop`'s
  SIGKILL is the only bound;
- P/D (--disaggregation-mode prefill|decode): standin/sglang_pd.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Dict, List, Optional

from standin.app import GENERATION_PATHS, App, listen, log
from standin.args import ServerArgs
from standin.config import Config, read_knobs, shown_env
from standin.httpio import Request, json_response, response_bytes
from standin.instance import InstanceEngine
from standin.metrics import CONTENT_TYPE, histogram_samples
from standin.sglang_pd import BACKENDS, DEFAULT_BOOTSTRAP_PORT, MODES, Disaggregation, PdError, error_body

VERSION = "0.5.23"
FLAGS_FILE = Path(__file__).with_name("data") / "sglang_flags.json"
HEALTH_CHECK_TIMEOUT_S = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))  # http_server.py:218
WATCHDOG_POLL_S = 5.0  # sigterm_watchdog's `await asyncio.sleep(5)` (tokenizer_manager.py:3510, :3538-3539)
LOAD_S = 0.5
PROG = "sglang serve"  # prepare_server_args' ArgumentParser(prog=...)


class ParseError(Exception):
    pass


def _options() -> Dict[str, str]:
    kinds = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))[VERSION]
    return {option: kind for kind, options in kinds.items() for option in options}


def parse(argv: List[str]) -> Dict[str, object]:
    """{option: value (True for a flag)} as argparse reads SGLang's options; ParseError with argparse's words."""
    options = _options()
    values: Dict[str, object] = {}
    unknown: List[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        flag, eq, inline = word.partition("=")
        kind = options.get(flag)
        if kind is None:
            unknown.append(word)
            i += 1
            continue
        if kind == "flag":
            if eq:
                raise ParseError(f"argument {flag}: ignored explicit argument {inline!r}")
            values[flag] = True
            i += 1
        elif eq:
            values[flag] = inline
            i += 1
        elif kind == "list":
            j = i + 1
            while j < len(argv) and not argv[j].startswith("--"):
                j += 1
            values[flag] = argv[i + 1:j]
            i = j
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values[flag] = argv[i + 1]
            i += 2
        elif kind == "optional":
            values[flag] = True
            i += 1
        else:
            raise ParseError(f"argument {flag}: expected one argument")
    if unknown:
        raise ParseError(f"unrecognized arguments: {' '.join(unknown)}")
    for flag, choices in (("--disaggregation-mode", MODES), ("--disaggregation-transfer-backend", BACKENDS)):
        if flag in values and values[flag] not in choices:
            raise ParseError(f"argument {flag}: invalid choice: {values[flag]!r} (choose from "
                             + ", ".join(repr(c) for c in choices) + ")")
    if "--model-path" not in values and "--model" not in values:
        raise ParseError("the following arguments are required: --model-path/--model")
    return values


def _int(values, *flags) -> Optional[int]:
    for flag in flags:
        if flag in values:
            try:
                return int(values[flag])
            except ValueError:
                raise ParseError(f"argument {flag}: invalid int value: {values[flag]!r}") from None
    return None


def server_args(values: Dict[str, object], argv: List[str]) -> ServerArgs:
    """The stand-in engine's view of SGLang's options (field defaults: arg_groups/fields/*.py)."""
    model = str(values.get("--model-path", values.get("--model")))
    name = values.get("--served-model-name")
    return ServerArgs(
        model=model, served_names=(str(name) if name else model,), tp=_int(values, "--tp-size",
                                                                          "--tensor-parallel-size") or 1,
        max_model_len=_int(values, "--context-length"), max_num_seqs=_int(values, "--max-running-requests"),
        max_num_batched_tokens=_int(values, "--chunked-prefill-size"),
        host=str(values.get("--host", "127.0.0.1")), port=_int(values, "--port") or 30000,
        quantization=values.get("--quantization"), kv_cache_dtype=values.get("--kv-cache-dtype"),
        quantization_param_path=None, ignored=(), argv=tuple(argv))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(engine: InstanceEngine, model_name: str, engine_type: str = "unified") -> bytes:
    """SGLang's /metrics text for the stand-in's one engine (names and help texts of metrics_collector.py)."""
    labels = f'model_name="{_label(model_name)}",engine_type="{engine_type}"'
    lines: List[str] = []
    caches = [cache for _, cache in engine.caches]

    def metric(name: str, kind: str, help_text: str, value: float) -> None:
        lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)!r}"))

    def histogram(name: str, help_text: str, of) -> None:
        lines.extend((f"# HELP {name} {help_text}", f"# TYPE {name} histogram"))
        lines.extend(histogram_samples(name, labels, of(caches[0])))

    cache = caches[0]
    metric("sglang:num_running_reqs", "gauge", "The number of running requests.", cache.running)  # :365
    metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", cache.waiting)  # :371
    metric("sglang:token_usage", "gauge", "The token usage.", cache.usage())  # :405
    metric("sglang:num_retracted_requests_total", "counter", "Total number of retracted requests.",
           cache.preemptions)  # :559
    metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           cache.prompt_tokens)  # :1856
    metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
           cache.generation_tokens)  # :1861
    histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              lambda c: c.ttft)  # :2041
    histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              lambda c: c.itl)  # :2051
    histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
              lambda c: c.e2e)  # :2068
    histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", lambda c: c.queue)  # :838
    # :884-890, label `stage`: of a mixed server's stages the scheduler observes request_process and
    # prefill_forward (req_time_stats.py RequestStage, metrics_is_observed); the stand-in models the prefill's
    stage = "sglang:per_stage_req_latency_seconds"
    lines.extend((f"# HELP {stage} The latency of each stage of requests.", f"# TYPE {stage} histogram"))
    lines.extend(histogram_samples(stage, labels + ',stage="prefill_forward"', cache.prefill))
    histogram("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", lambda c: c.prompt_len)
    histogram("sglang:generation_tokens_histogram", "Histogram of generation token length.",
              lambda c: c.generation_len)  # :1909, :1925
    return ("\n".join(lines) + "\n").encode("utf-8")


class SglangApp(App):
    """The stand-in's routes with SGLang's health, metrics and stop."""

    def __init__(self, config: Config, engine: InstanceEngine, metrics: bool,
                 pd: Optional[Disaggregation] = None) -> None:
        super().__init__(config, engine)
        self.metrics_on = metrics
        self.pd = pd
        self.gracefully_exit = False  # TokenizerManager.gracefully_exit, set by the SIGTERM handler
        self.version = VERSION

    async def handle(self, req: Request, writer: asyncio.StreamWriter) -> None:
        if req.path in ("/health", "/health_generate") and req.method == "GET":
            # http_server.py:721-795: `Response(status_code=...)`, no body
            ok = not self.gracefully_exit and (req.path == "/health" or await self._generates_one_token())
            writer.write(response_bytes(200 if ok else 503, b"", req.keep_alive, content_type=None))
            await writer.drain()
            return
        if req.path == "/metrics" and not self.metrics_on:
            writer.write(response_bytes(404, b'{"detail":"Not Found"}', req.keep_alive))
            await writer.drain()
            return
        pd = self.pd
        if pd is not None and req.method == "POST" and req.path in GENERATION_PATHS:
            try:
                req = pd.request_for_role(req)
                if pd.mode == "decode":
                    await pd.fetch_kv(req)
            except PdError as exc:
                writer.write(json_response(exc.status, error_body(exc.status, str(exc)), req.keep_alive))
                await writer.drain()
                return
            await super().handle(req, writer)
            if pd.mode == "prefill":
                pd.prefilled(req)
            return
        await super().handle(req, writer)

    async def _generates_one_token(self) -> bool:
        """/health_generate's wait (http_server.py:775-782): any answer of the scheduler within the timeout, polled
        every second; a hung engine gives none."""
        stalls = self.engine.stalls
        waited = 0.0
        while stalls is not None and any(stall.hung for stall in stalls.engines.values()):
            if waited >= HEALTH_CHECK_TIMEOUT_S:
                return False
            await asyncio.sleep(1.0)
            waited += 1.0
        return True

    def _metrics(self, keep_alive: bool) -> bytes:
        engine_type = self.pd.engine_type if self.pd is not None else "unified"
        return response_bytes(200, render_metrics(self.engine, self.config.args.served_names[0], engine_type),
                              keep_alive, CONTENT_TYPE)


def main(argv: List[str]) -> int:
    try:
        values = parse(argv)
        args = server_args(values, argv)
    except ParseError as exc:
        print(f"usage: {PROG} [-h] ...\n{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    env = os.environ
    nodes, rank = _int(values, "--nnodes") or 1, _int(values, "--node-rank") or 0
    gpus = [d for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if gpus and gpus != ["all"] and len(gpus) < args.tp // nodes:
        # SGLang starts one scheduler process per TP rank on its own GPU (tp_rank -> gpu_id), tp/nnodes a node
        print(f"standin: refusing to start: --tp-size {args.tp} over {nodes} node(s) but {len(gpus)} GPU(s) "
              "visible", flush=True)
        return 1
    if rank >= 1:
        # entrypoints/http_server.py:3163-3165 and engine.py:1234-1235: a node of rank >= 1 runs no tokenizer and
        # no HTTP server; it serves its schedulers until they exit
        return _follow(rank, nodes, str(values.get("--dist-init-addr", "")))
    knobs = read_knobs(env)
    config = Config(args=args, role="mixed", knobs=knobs, layout=None, max_model_len=args.max_model_len or 4096,
                    devices_seen=tuple(gpus), env_names=tuple(sorted(env)), env_shown=shown_env(env))
    mode = str(values.get("--disaggregation-mode", "null"))
    pd = None
    if mode != "null":
        bootstrap_port = _int(values, "--disaggregation-bootstrap-port") or DEFAULT_BOOTSTRAP_PORT
        pd = Disaggregation(mode, str(values.get("--disaggregation-transfer-backend", "mooncake")), bootstrap_port,
                            args.host)
    try:
        return asyncio.run(_run(config, bool(values.get("--enable-metrics")), pd))
    except KeyboardInterrupt:
        return 0


def _follow(rank: int, nodes: int, dist_init_addr: str) -> int:
    log(f"sglang {VERSION}: node rank {rank} of {nodes} (--dist-init-addr {dist_init_addr}): no HTTP server")

    async def wait() -> None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, stop.set)
        await stop.wait()

    asyncio.run(wait())
    return 0


async def _run(config: Config, metrics: bool, pd: Optional[Disaggregation]) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)  # until it serves, a signal ends it at once
    args = config.args
    log(f"sglang {VERSION}: model {args.model}, served as {args.served_names[0]}, tp-size {args.tp}, "
        f"port {args.port}, metrics {'on' if metrics else 'off'}")
    try:
        await asyncio.sleep(max(config.knobs.startup_s, LOAD_S))
        engine = InstanceEngine(config.knobs, False, args.max_num_seqs, max_model_len=config.max_model_len)
        app = SglangApp(config, engine, metrics, pd)
        try:
            bootstrap = await pd.start() if pd is not None else None
        except OSError as exc:
            log(f"error: {exc}")
            return 1
        server = await listen(app.serve_connection, args.host, args.port)
        if server is None:
            return 1
    except asyncio.CancelledError:
        return 0
    log(f"The server is fired up and ready to roll! (http://{args.host}:{args.port})")  # http_server.py's line
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(signum)
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
        app.gracefully_exit = True
        log("SIGTERM received. Draining requests and shutting down...")
        while True:
            await asyncio.sleep(WATCHDOG_POLL_S)
            left = engine.in_flight()
            log(f"Gracefully exiting... Remaining number of requests {left}.")
            if left == 0:
                break
        server.close()
        if bootstrap is not None:
            bootstrap.close()
    return 0
