"""`deployctl watch` (its loop, as users run it) against a saturated deployment: no restart in --seconds (default 120)
of a closed-loop load that keeps each rank's queue long; then one rank stalled: how long until its whole DP group
restarts (target: within 2 probe periods of the stall, plus the probe's own time).

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/watch_saturation.py
    [--seconds 120] [--interval 10]
Brings up a 2-host test bed; a vllm-ascend DP group of 2 ranks (external launch) on tb1 and another group on tb2,
stand-ins with an emulated KV cache of 4 sequences per engine and 20 ms a token (slower under load). Prints each
figure, its target and PASS/FAIL; exit 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import Testbed  # noqa: E402
from tests.testbed.demo import place_tiny_model  # noqa: E402

HOSTS = 2
CONCURRENCY = 24  # requests kept in flight per rank: 4 run, 20 wait
TOPOLOGY = """topology:
  mode: mixed
  dp_launch: external
  groups:
    - {hosts: [tb1], dp: 2, tp: 2, port: 8400}
    - {hosts: [tb2], dp: 1, tp: 2, port: 8410}
"""
EXTRA = ("server: vllm-ascend\nrequirements: {cards: 8}\n"
         "image: {name: deployctl/standin-vllm:latest}\n"
         "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
         "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
         "env: {STANDIN_CAPACITY: '4', STANDIN_TPOT_MS: '20'}\n")



def closed_loop(bed: Testbed, seconds: float) -> threading.Thread:
    """CONCURRENCY clients per rank of the group, each sending its next 60-token request when the last ended."""
    body = json.dumps({"model": "tiny", "prompt": "saturate the engine", "max_tokens": 60})
    script = ('end=$(( $(date +%s) + ' + str(int(seconds)) + ' )); for p in 8400 8401; do i=0; while [ $i -lt '
              + str(CONCURRENCY) + ' ]; do (while [ $(date +%s) -lt $end ]; do curl --silent --output /dev/null '
              '--max-time 120 -H "Content-Type: application/json" --data "$0" "http://127.0.0.1:$p/v1/completions"; '
              'done) & i=$((i+1)); done; done; wait')
    thread = threading.Thread(target=bed.run_on, args=("tb1", ["sh", "-c", script, body]),
                              kwargs={"timeout": seconds + 300}, daemon=True)
    thread.start()
    return thread


def watch_loop(cli, spec: Path, interval: float, until) -> list[tuple[float, dict]]:
    """`deployctl watch` in its loop; each JSON line with the time it arrived, until `until(lines)` says stop."""
    proc = subprocess.Popen([*cli, "watch", str(spec), "--interval", str(interval), "--hang-timeout", "5",
                             "--output", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=tempfile.gettempdir())
    lines: list[tuple[float, dict]] = []
    try:
        for raw in proc.stdout:
            lines.append((time.monotonic(), json.loads(raw)))
            if until(lines):
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="saturation to watch (default 120)")
    parser.add_argument("--interval", type=float, default=10.0, help="watch --interval (default 10)")
    args = parser.parse_args()
    bed = Testbed(HOSTS).up(HOSTS)
    try:
        place_tiny_model(bed)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "spec.yaml"
            spec.write_text(bed.spec_yaml("bench-watch", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=EXTRA))
            cli = [sys.executable, "-m", "deployctl"]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run([*cli, "up", str(spec), "--skip", "weights", "--yes"], check=True, capture_output=True,
                           env=env, cwd=tempfile.gettempdir())

            load = closed_loop(bed, args.seconds)
            started = time.monotonic()
            saturated = watch_loop(cli, spec, args.interval, lambda _: time.monotonic() - started >= args.seconds)
            load.join(args.seconds + 300)
            observations = [doc for _, doc in saturated if doc["type"] == "observation"]
            restarts = [doc for _, doc in saturated if doc["type"] == "action"]
            probes = len({round(doc["time"]) for doc in observations if doc["instance"].endswith("mixed0-r0")})
            verdicts = Counter(doc["verdict"] for doc in observations)
            held = max((sum((e["running"] or 0) + (e["waiting"] or 0) for e in doc["engines"].values())
                        for doc in observations), default=0)

            bed.run_on("tb1", ["curl", "--silent", "-X", "POST", "--data", '{"mode": "hang"}',
                               "http://127.0.0.1:8401/standin/stall"])
            stalled_at = time.monotonic()
            stall = watch_loop(cli, spec, args.interval,
                               lambda lines: lines[-1][1]["type"] == "action" and lines[-1][1]["result"] != "restarting")
            acted = [(t, doc) for t, doc in stall if doc["type"] == "action"]
            seen = acted[0][0] - stalled_at
            done = acted[-1][1]
            subprocess.run([*cli, "down", str(spec), "--yes"], capture_output=True, env=env, cwd=tempfile.gettempdir())
    finally:
        bed.down()
    ok_saturation = not restarts
    ok_stall = done["result"] == "ok" and done["unit"] == "mixed0" and seen <= 2 * args.interval + 5 + 5
    print(f"saturation: {args.seconds:g} s, {CONCURRENCY} clients per rank, watch --interval {args.interval:g}: "
          f"{probes} probes, verdicts {dict(verdicts)}, at most {held:g} requests held by one server, "
          f"{len(restarts)} restarts (target 0) {'PASS' if ok_saturation else 'FAIL'}")
    print(f"one rank stalled: its group ({', '.join(done['containers'])}) restart began {seen:.1f} s after the stall, "
          f"result {done['result']} (target <= 2 periods + the probe's 5 s bound + 5 s: "
          f"{2 * args.interval + 10:g} s) {'PASS' if ok_stall else 'FAIL'}; reason: {done['reason']}")
    return 0 if ok_saturation and ok_stall else 1


if __name__ == "__main__":
    raise SystemExit(main())
