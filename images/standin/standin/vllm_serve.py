"""`vllm serve MODEL ...` (upstream vLLM + vllm-ascend): check, bind the KV connector's ports, rendezvous with the
DP group, and only once every rank has joined pretend to load weights and listen (headless: serve no HTTP)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from standin.app import listen, log
from standin.ascend_config import AscendConfig, bind_kv_ports, load_ascend
from standin.ascend_engine import AscendApp, serve_kv_ports
from standin.config import Refusal
from standin.dpgroup import DpMaster, Registration, register, rejoin
from standin.drain import StopPolicy
from standin.main import LOAD_STEPS, _crash, serve_until_stopped
from standin.startup import compile_graphs, compile_key, loaded_weights, startup_complete
from standin.serve_flags import USAGE as ARGPARSE_USAGE, UsageError

USAGE = """usage: vllm serve MODEL [--served-model-name NAME] [--host H] [--port P] [--max-model-len N]
         [--tensor-parallel-size TP] [--data-parallel-size DP] [--data-parallel-rank R |
         --data-parallel-size-local L --data-parallel-start-rank S] [--data-parallel-address A]
         [--data-parallel-rpc-port RP] [--enable-expert-parallel] [--headless] [--kv-transfer-config JSON]
         [--additional-config JSON] [--compilation-config JSON] [any other flag of the emulated vLLM]
The deployctl test bed's stand-in for upstream vLLM with vllm-ascend; see images/standin/README.md."""


def main(argv) -> int:
    started = time.monotonic()
    if not argv or argv[0] in ("--help", "-h") or "--help" in argv:
        print(USAGE, flush=True)
        return 0 if argv else 2
    try:
        config = load_ascend(argv, os.environ)
        kv_sockets = bind_kv_ports(config.kv, config.args, config.if_ip) if config.kv else []
    except UsageError as exc:
        # vLLM's parser is argparse: usage and the error on stderr, exit status 2, before anything else runs
        print(f"{ARGPARSE_USAGE}\nvllm serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Refusal as exc:
        print(f"standin: refusing to start: {exc}", flush=True)
        return 1
    log(f"vllm-ascend {config.version.release.name} on vLLM {config.version.vllm}")
    for word in config.base.args.ignored:
        log(f"not emulated: vLLM argument {word}")
    try:
        return asyncio.run(_run(config, kv_sockets, started))
    except KeyboardInterrupt:
        return 0


def _registration(c: AscendConfig) -> Registration:
    a = c.args
    return Registration(start=a.start, local=a.local, external=a.external, dp=a.dp, tp=a.server.tp,
                        expert_parallel=a.expert_parallel, engine_id=c.kv.engine_id if c.kv else None,
                        kv_extra=c.kv.extra if c.kv else None, devices=c.devices, host=c.if_ip,
                        api_port=None if a.headless else a.server.port, headless=a.headless,
                        refuses_headless=c.hybrid_lb)


async def _until(awaitable, fatal: asyncio.Future):
    """Await `awaitable` unless `fatal` resolves first (then its exit code is returned)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task, fatal}, return_when=asyncio.FIRST_COMPLETED)
    if fatal in done:
        task.cancel()
        return fatal.result()
    return None


async def _run(config: AscendConfig, kv_sockets, started: float) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)  # PID 1 in a container: no default handlers
    knobs = config.base.knobs
    if knobs.crash_after_s is not None:
        loop.call_at(loop.time() + knobs.crash_after_s - (time.monotonic() - started), _crash, knobs.crash_after_s)
    a, server = config.args, config.args.server
    fatal = loop.create_future()
    background = []  # tasks referenced here so they live as long as the server
    kv_ports = tuple(s.getsockname()[1] for s in kv_sockets)
    log(f"role {config.base.role} (vllm serve): model {server.model}, served as {', '.join(server.served_names)}, "
        f"dp {a.dp} ranks {','.join(map(str, a.ranks))} ({'external' if a.external else 'internal'}), "
        f"tp {server.tp}, devices {','.join(map(str, config.devices))}, "
        + (f"kv {config.kv.role} engine {config.kv.engine_id} ports {kv_ports[0]}-{kv_ports[-1]}, "
           if config.kv else "")
        + ("headless" if a.headless else f"port {server.port}"))
    try:
        await serve_kv_ports(config, kv_sockets)
        if a.dp > 1:
            own = _registration(config)
            if a.start == 0:
                master = DpMaster(own, a.address or "127.0.0.1", a.rpc_port, fatal)
                try:
                    await master.start()
                except Refusal as exc:
                    print(f"standin: refusing to start: {exc}", flush=True)
                    return 1
                code = await _until(master.ready.wait(), fatal)
            else:
                try:
                    reader, _ = await register(own, a.address or "127.0.0.1", a.rpc_port)
                except Refusal as exc:
                    print(f"standin: refusing to start: {exc}", flush=True)
                    return 1
                rejoining = rejoin(own, a.address or "127.0.0.1", a.rpc_port, reader, fatal)
                background.append(asyncio.ensure_future(rejoining))
                code = None
            if code is not None:
                return code
        for step in range(1, LOAD_STEPS + 1):
            await asyncio.sleep(knobs.startup_s / LOAD_STEPS)
            log(f"loading weights {step}/{LOAD_STEPS}")
        await loaded_weights(knobs.startup_s)  # what vLLM prints next, and its compile cache (standin/startup.py)
        await compile_graphs(os.environ, compile_key(server.model, server.tp, a.dp, config.version.vllm if config.version else ""))
        if a.headless:
            log("startup complete: headless (serves no HTTP)")
            return await fatal
        app = AscendApp(config, kv_ports)
        app.engine.on_engine_death = lambda: fatal.done() or fatal.set_result(1)
        http = await listen(app.serve_connection, server.host, server.port)
        if http is None:
            return 1
        log(f"startup complete: serving on http://{server.host}:{server.port}"
            + (" (STANDIN_NEVER_READY: /health answers 503)" if knobs.never_ready else ""))
        startup_complete()
        code = await serve_until_stopped(http, app, stop_policy(config), app.engine, fatal)
        if code is not None:
            return code
    except asyncio.CancelledError:
        pass
    log("shutting down")
    return 0


def stop_policy(config: AscendConfig) -> StopPolicy:
    """vLLM >= 0.18 drains or aborts by --shutdown-timeout (vllm #34730, first in v0.18.0); older ones stop as
    uvicorn does (standin/drain.py)."""
    if config.version is not None and config.version.vllm_tuple >= (0, 18):
        return StopPolicy("vllm", config.args.shutdown_timeout)
    return StopPolicy("uvicorn")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
