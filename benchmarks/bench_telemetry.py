"""What sampling telemetry costs the bench client at 1000 req/s (issue 24; target < 5 % of its throughput).

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/bench_telemetry.py
A 2-host test bed runs a deployment of the stand-in (mixed, one instance per host, emulated NPU utilisation), so
the sampler has real SSH hosts with npu-smi and /metrics to read; the load goes to stand-in processes on
127.0.0.1 (as benchmarks/bench_client.py), so the figure is the client's. Each round runs the same 1000 req/s
Poisson schedule once without and once with the sampler (1 s interval, the default), alternating; prints the
completed rate and the client's CPU per request of each, and the throughput cost (median); exit 1 past 5 %.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_client import one_rate, start_servers  # noqa: E402
from benchmarks.up_noop import place_tiny_model  # noqa: E402
from tests.testbed import Testbed  # noqa: E402

RATE = 1000.0
SECONDS = 5.0
ROUNDS = 3
TARGET_PCT = 5.0
TOPOLOGY = """topology:
  mode: mixed
  instances:
    - {host: tb1, devices: [0, 1], port: 8790}
    - {host: tb2, devices: [0, 1], port: 8790}
"""


def deploy(bed: Testbed, tmp: Path) -> Path:
    spec = tmp / "spec.yaml"
    spec.write_text(bed.spec_yaml("bench-telemetry", TOPOLOGY, extra=(
        "image: {name: deployctl/standin-vllm:latest}\n"
        "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
        "model: {served_name: tiny, max_model_len: 2048, max_num_batched_tokens: 2048}\n")))
    up = subprocess.run([sys.executable, "-m", "deployctl", "up", str(spec), "--skip", "weights", "--yes"],
                        capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"up failed:\n{up.stdout}{up.stderr}")
    return spec


async def with_sampler(sampler, urls, seed):
    sampler.start_run()
    try:
        return await one_rate(urls, RATE, int(RATE * SECONDS), seed)
    finally:
        samples = sampler.end_run()
        with_sampler.samples = len(samples)


def main() -> int:
    from deployctl.bench.sampler import TelemetrySampler
    from deployctl.hosts import connected
    from deployctl.spec.load import load_spec

    bed = Testbed(2).up(2)
    plain, sampled = [], []
    try:
        place_tiny_model(bed)
        for host in ("tb1", "tb2"):
            bed.set_profile(host, stats={"0": {"aicore": 80}, "1": {"aicore": 80}})
        with tempfile.TemporaryDirectory() as tmp:
            spec = load_spec(deploy(bed, Path(tmp)))
            servers = start_servers(3, Path(tmp))
            urls = [f"http://127.0.0.1:{port}" for _, port in servers]
            try:
                with connected(spec, hosts=spec.used_hosts) as transports:
                    sampler = TelemetrySampler(spec, transports, interval=1.0)
                    asyncio.run(one_rate(urls, RATE, int(RATE), seed=0))  # warm-up
                    for round_ in range(ROUNDS):
                        plain.append(asyncio.run(one_rate(urls, RATE, int(RATE * SECONDS), seed=round_ + 1)))
                        sampled.append(asyncio.run(with_sampler(sampler, urls, round_ + 1)))
                        print(f"round {round_ + 1}: without {plain[-1]['completed_per_s']:.0f} req/s "
                              f"({plain[-1]['client_cpu_us_per_request']:.0f} us CPU/request), with "
                              f"{sampled[-1]['completed_per_s']:.0f} req/s "
                              f"({sampled[-1]['client_cpu_us_per_request']:.0f} us CPU/request, "
                              f"{with_sampler.samples} samples)")
            finally:
                for proc, _ in servers:
                    proc.terminate()
                subprocess.run([sys.executable, "-m", "deployctl", "down", str(Path(tmp) / "spec.yaml"), "--yes"],
                               capture_output=True)
    finally:
        bed.down()
    without = statistics.median(r["completed_per_s"] for r in plain)
    with_ = statistics.median(r["completed_per_s"] for r in sampled)
    cost = 100.0 * (without - with_) / without
    cpu = (statistics.median(r["client_cpu_us_per_request"] for r in sampled)
           - statistics.median(r["client_cpu_us_per_request"] for r in plain))
    failed = sum(r["failed"] for r in plain + sampled)
    print(f"at {RATE:g} req/s: {without:.0f} req/s without telemetry, {with_:.0f} with; cost {cost:.1f} % "
          f"(target < {TARGET_PCT:g} %), client CPU {cpu:+.0f} us/request; {failed} failed requests "
          f"{'PASS' if cost < TARGET_PCT and not failed else 'FAIL'}")
    return 0 if cost < TARGET_PCT and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
