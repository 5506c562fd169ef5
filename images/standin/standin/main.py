"""Start-up: check, pretend to load weights, listen; stop on SIGTERM (the server is PID 1 in its container)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from standin.app import App, listen, log
from standin.config import Config, Refusal, hccn_conf_readable, load_config
from standin.drain import StopPolicy, Stopper, stop_gracefully
from standin.instance import InstanceEngine
from standin.scheduler import SchedulerEngine
from standin.startup import compile_graphs, compile_key, loaded_weights, startup_complete

LOAD_STEPS = 4
USAGE = """usage: python -m vllm.entrypoints.openai.api_server --model DIR [--tensor-parallel-size N] [--port P]
         [--served-model-name NAME] [--max-model-len N] [other vLLM flags, ignored]
   or: sh .../PD_separate/start_servers.sh <the same flags>  (with GLOBAL_RANK_TABLE_FILE_PATH,
         RANK_TABLE_FILE_PATH, NODE_PORTS, USE_OPENAI=1)
The deployctl test bed's stand-in for vLLM; STANDIN_* environment variables: see images/standin/README.md."""


def main(argv, launcher: str) -> int:
    """launcher: "api_server" (mixed) or "start_servers" (prefill, decode or scheduler, from the ranktables)."""
    started = time.monotonic()
    if "--help" in argv or "-h" in argv:
        print(USAGE, flush=True)
        return 0
    try:
        config = load_config(argv, launcher, os.environ)
    except Refusal as exc:
        print(f"standin: refusing to start: {exc}", flush=True)
        return 1
    for word in config.args.ignored:
        log(f"ignoring unknown vLLM argument {word}")
    try:
        return asyncio.run(_run(config, started))
    except KeyboardInterrupt:
        return 0


async def _run(config: Config, started: float) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        # PID 1 ignores signals without a handler, so `docker stop` would wait for its SIGKILL. Until it serves,
        # a signal ends it at once; once serving, it stops gracefully (serve_until_stopped).
        loop.add_signal_handler(signum, task.cancel)
    knobs = config.knobs
    if knobs.crash_after_s is not None:
        loop.call_at(loop.time() + knobs.crash_after_s - (time.monotonic() - started), _crash, knobs.crash_after_s)
    args = config.args
    log(f"role {config.role}: model {args.model}, served as {', '.join(args.served_names)}, "
        f"tensor-parallel-size {args.tp}, max-model-len {config.max_model_len}, port {args.port}")
    if config.layout is not None:
        log("ranktable checks passed: " + ", ".join(config.layout.checks_passed))
    try:
        for step in range(1, LOAD_STEPS + 1):
            await asyncio.sleep(knobs.startup_s / LOAD_STEPS)
            log(f"loading weights {step}/{LOAD_STEPS}")
        if config.role != "scheduler":  # what vLLM prints next, and its torch.compile cache (standin/startup.py)
            await loaded_weights(knobs.startup_s)
            await compile_graphs(os.environ, compile_key(args.model, args.tp, 1, "ascendcloud"))
        if knobs.fail_hccl_timeout:
            _hccl_timeout()
            return 1
        app = App(config, _engine(config))
        server = await listen(app.serve_connection, args.host, args.port)
        if server is None:
            return 1
        log(f"startup complete: serving on http://{args.host}:{args.port}"
            + (" (STANDIN_NEVER_READY: /health answers 503)" if knobs.never_ready else ""))
        startup_complete()
        policy = openai_stop_policy(args.shutdown_timeout)
        await serve_until_stopped(server, app, policy, app.engine if policy.kind == "vllm" else None)
    except asyncio.CancelledError:
        pass
    log("shutting down")
    return 0


def openai_stop_policy(timeout: "int | None") -> StopPolicy:
    """The OpenAI server's version is not known here (a vendor image, vLLM on GPU): one that took
    --shutdown-timeout is vLLM >= 0.18 and drains or aborts by it (vllm #34730/#36666, standin/drain.py); else it
    stops as vLLM without the flag, or the vendor's launcher, does: uvicorn's graceful shutdown."""
    return StopPolicy("vllm", timeout) if timeout is not None else StopPolicy("uvicorn")


async def serve_until_stopped(server: asyncio.AbstractServer, app, policy: StopPolicy, engine=None,
                              fatal: "asyncio.Future | None" = None):
    """Serve until SIGTERM/SIGINT, then stop as `policy` says (standin/drain.py); `fatal` (an exit code) ends it
    at once. Returns `fatal`'s result, or None after a stop."""
    loop = asyncio.get_running_loop()
    stopper = Stopper(policy)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopper.signal)
    async with server:
        waits = {asyncio.ensure_future(stopper.requested.wait())}
        if fatal is not None:
            waits.add(fatal)
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiter in pending:
            if waiter is not fatal:
                waiter.cancel()
        if fatal is not None and fatal.done():
            return fatal.result()
        await stop_gracefully(server, app.connections, stopper, log, engine, app)
    return None


def _engine(config: Config):
    if config.role == "scheduler":
        return SchedulerEngine(config.layout)
    # P/D instances move KV over HCCL, which reads /etc/hccn.conf
    garbled = config.role in ("prefill", "decode") and not hccn_conf_readable(config.knobs)
    if garbled:
        log(f"{config.knobs.hccn_conf} is not a readable file: HCCL runs without its NIC table, answers are wrong")
    return InstanceEngine(config.knobs, garbled, config.args.max_num_seqs, max_model_len=config.max_model_len)


def _hccl_timeout() -> None:
    """STANDIN_FAIL_HCCL_TIMEOUT: what torch_npu prints when HCCL's first collective times out (CANN's EI0002)."""
    pid, now = os.getpid(), time.time()
    stamp = time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}.000"
    tag = "streamID:[2], taskID[14], tag[AllReduce_hccl_world_group], AlgType(level 0-1-2):[fullmesh-ring-NHR]"
    lines = [
        f"[ERROR] HCCL({pid},python3):{stamp} [task_exception_handler.cc:785] [{pid}][TaskExceptionHandler]"
        f"[Callback]Task run failed, base information is {tag}",
        "RuntimeError: HCCL function error: HcclAllreduce, error code is 9",
        f"[ERROR] {stamp[:19]} (PID:{pid}, Device:0, RankID:0) ERR02200 DIST call hccl api failed.",
        f"EI0002: [PID: {pid}] {stamp} The wait execution of the Notify register times out. Reason: The Notify "
        f"register has not received the Notify record from remote rank [1].base information: [{tag}.]",
        "        Possible Cause: 1. An exception occurs during the execution on some NPUs in the cluster. As a result, "
        "collective communication operation failed.2. The execution speed on some NPU in the cluster is too slow to "
        "complete a communication operation within the timeout interval. (default 1800s, You can set the interval by "
        "using HCCL_EXEC_TIMEOUT.)",
        "        Solution: 1. Check the exception in other NPUs of the cluster.",
        "        TraceBack (most recent call last):",
    ]
    print("\n".join(lines), flush=True)
    log("exiting with status 1 (STANDIN_FAIL_HCCL_TIMEOUT)")


def _crash(after_s: float) -> None:
    print(f"standin: crashing on purpose after {after_s:g} s (STANDIN_CRASH_AFTER_S)", flush=True)
    sys.stdout.flush()
    os._exit(1)
