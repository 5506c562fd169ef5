"""The bench client's ceiling: the highest Poisson rate of short streaming requests it sustains on this machine.

Run: python benchmarks/bench_client.py [--servers 3] [--rates 500 1000 2000 3000] [--seconds 3]
It starts stand-in servers (images/standin) on 127.0.0.1 with no TTFT/TPOT delay, one process per port, and
spreads the requests over them round robin, so the figure is the client's, not one server process's. For each
rate it reports the achieved send rate, the completion rate, failures, and the client's own CPU seconds
(user+sys of this process; the servers are child processes and not counted). A rate is sustained when every
request succeeded, the sends kept the schedule (achieved >= 95 % of the asked rate) and the responses kept up
(completed/s >= 95 %). Target: >= 2000 req/s. Exits 1 when the target is missed. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployctl.bench.client import BaseUrl  # noqa: E402
from deployctl.bench.load import Sender, poisson_offsets, run_poisson  # noqa: E402
from deployctl.bench.metrics import summarize_run  # noqa: E402
from deployctl.bench.prompts import synthetic_prompt  # noqa: E402

TARGET_RPS = 2000.0
OUTPUT_TOKENS = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_servers(count: int, workdir: Path) -> list[tuple[subprocess.Popen, int]]:
    weights, dev = workdir / "weights", workdir / "dev"
    weights.mkdir()
    dev.mkdir()
    (weights / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    (dev / "davinci0").touch()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "images" / "standin"), "STANDIN_STARTUP_S": "0",
           "STANDIN_DEV_DIR": str(dev), "STANDIN_TTFT_MS": "0", "STANDIN_TPOT_MS": "0"}
    servers = []
    for _ in range(count):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights),
                                 "--tensor-parallel-size", "1", "--host", "127.0.0.1", "--port", str(port),
                                 "--served-model-name", "m"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
        servers.append((proc, port))
    for proc, port in servers:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"stand-in on port {port} did not start")
                time.sleep(0.05)
    return servers


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_rate(urls: list[str], rate: float, count: int, seed: int) -> dict:
    sender = Sender([BaseUrl.parse(u) for u in urls], "m", "completions")
    prompts = [synthetic_prompt(16, OUTPUT_TOKENS, salt=i) for i in range(count)]
    prepared = sender.prepare(prompts, f"rate{rate:g}")
    offsets = poisson_offsets(count, rate, seed)
    await sender.prewarm(min(count, 256))
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    try:
        records = await run_poisson(sender, prepared, offsets)
    finally:
        sender.close()
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    records = sender.counted(records, prepared)
    sends = sorted(r.sent_ns for r in records)
    send_span = (sends[-1] - sends[0]) / 1e9
    run = summarize_run(records, request_rate=rate)
    return {"rate": rate, "requests": count, "failed": run["failed"],
            "sent_per_s": (count - 1) / send_span if send_span > 0 else float("inf"),
            "scheduled_per_s": (count - 1) / offsets[-1] if offsets[-1] > 0 else float("inf"),
            "completed_per_s": run["request_throughput"], "client_cpu_s": cpu, "wall_s": wall,
            "client_cpu_us_per_request": cpu / count * 1e6, "ttft_p50_ms": run["ttft_ms"]["p50"],
            "ttft_p99_ms": run["ttft_ms"]["p99"], "errors": run["errors"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--rates", type=float, nargs="+", default=[500, 1000, 2000, 3000, 4000])
    parser.add_argument("--seconds", type=float, default=3.0, help="load per rate")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        servers = start_servers(args.servers, Path(tmp))
        urls = [f"http://127.0.0.1:{port}" for _, port in servers]
        try:
            best = 0.0
            print(f"{args.servers} stand-in process(es); {OUTPUT_TOKENS} tokens per request, no server delay; "
                  f"{os.cpu_count()} CPUs")
            for rate in args.rates:
                result = asyncio.run(one_rate(urls, rate, int(rate * args.seconds), seed=int(rate)))
                sustained = (result["failed"] == 0 and result["sent_per_s"] >= 0.95 * result["scheduled_per_s"]
                             and result["completed_per_s"] >= 0.95 * result["scheduled_per_s"])
                if sustained:
                    best = max(best, rate)
                print(f"rate {rate:>6g}/s: sent {result['sent_per_s']:8.0f}/s (schedule {result['scheduled_per_s']:.0f}/s), "
                      f"completed {result['completed_per_s']:8.0f}/s, failed {result['failed']}, client CPU "
                      f"{result['client_cpu_s']:.2f} s over {result['wall_s']:.2f} s "
                      f"({result['client_cpu_us_per_request']:.0f} us/request), TTFT p50/p99 "
                      f"{result['ttft_p50_ms'] or 0:.1f}/{result['ttft_p99_ms'] or 0:.1f} ms"
                      + ("" if sustained else "  <- not sustained") + (f" {result['errors']}" if result["errors"] else ""))
        finally:
            for proc, _ in servers:
                proc.terminate()
            for proc, _ in servers:
                proc.wait(timeout=5)
    verdict = "PASS" if best >= TARGET_RPS else "FAIL"
    print(f"highest sustained Poisson rate: {best:g} req/s (target >= {TARGET_RPS:g}) {verdict}")
    return 0 if best >= TARGET_RPS else 1


if __name__ == "__main__":
    sys.exit(main())
