"""`deployctl tune` (issue 44): its overhead per candidate beyond the candidate's deploy and bench (target <= 10 %),
and its wall time against the full grid (`--grid`) on the same inputs.

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/tune_bench.py
A 1-host test bed runs the stand-in of tests/e2e/test_tune.py (its batch capped by --max-num-seqs, 40 ms a token,
the KV cache far above every candidate); the space is max_num_seqs 2, 4, 8, 16 x tp 1, 2 (dp 1): 8 candidates.
The search runs first, then `--grid` from an empty results directory (same deployment, same inputs), each as its
own `deployctl tune` process timed from outside. Per run: candidates measured, the winner, wall time, the sum of
each candidate's deploy (`up`, as tune runs it) and bench (`bench search`) as its record says, the ending deploy,
and the rest: the tune's own overhead (process start, gathering the hosts' cards, building and checking the space,
records, the plot), per candidate and against its deploy + bench. Figures only; nothing here is asserted by the tests
(exit 1 past the target or on different winners).

Measured (2026-11-28, one run, the shared 2-core machine): search 6 candidates, 61.3 s = deploy 20.9 + bench 36.2 +
ending deploy 3.5 + overhead 0.7 (0.12 s a candidate, 1.3 %); grid 8 candidates, 82.5 s = 28.2 + 50.3 + 3.4 + 0.6
(0.8 %); the same winner, tp1-dp1-seqs16-bt2048; the search took 74 % of the grid's time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import Testbed  # noqa: E402
from tests.testbed.demo import place_tiny_model  # noqa: E402

TARGET_PCT = 10.0
TOPOLOGY = "topology:\n  mode: mixed\n  instances:\n    - {host: tb1, devices: [0, 1], port: 8730}\n"
EXTRA = ("image: {name: deployctl/standin-vllm:latest}\nweights: {dest: /srv/weights/tiny}\n"
         "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 2, max_num_batched_tokens: 2048}\n"
         "env: {STANDIN_CAPACITY: '64', STANDIN_TTFT_MS: '20', STANDIN_TPOT_MS: '40', STANDIN_LOAD_SLOWDOWN: '0'}\n")
TUNE = ("--search", "max_num_seqs=2,4,8,16", "--search", "tp=1,2", "--search", "dp=1",
        "--search", "max_num_batched_tokens=2048", "--by", "concurrency", "--slo", "ttft_p99=300ms",
        "--prompt-tokens", "16", "--output-tokens", "16", "--epochs", "1", "--max-runs", "6",
        "--telemetry-interval", "0.2", "--skip", "weights", "--yes", "--output", "json")


def tune(spec: Path, *extra: str) -> dict:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "deployctl", "tune", str(spec), *TUNE, *extra],
                            capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"tune {' '.join(extra)} ended {result.returncode}:\n{result.stderr[-3000:]}")
    document = json.loads(result.stdout)
    records = [r for r in document["candidates"] if not r.get("reused")]
    deploy = sum(r["time_to_serve_s"] or 0.0 for r in records)
    bench = sum(r.get("bench_s") or 0.0 for r in records)
    rest = wall - deploy - bench - document["end_deploy_s"]
    return {"winner": document["winner"], "candidates": len(records), "wall_s": wall, "deploy_s": deploy,
            "bench_s": bench, "end_deploy_s": document["end_deploy_s"], "overhead_s": rest,
            "overhead_per_candidate_s": rest / max(1, len(records)),
            "overhead_pct": 100.0 * rest / (deploy + bench) if deploy + bench else 0.0}


def line(name: str, run: dict) -> str:
    return (f"{name}: {run['candidates']} candidate(s), winner {run['winner']}, wall {run['wall_s']:.1f} s = deploy "
            f"{run['deploy_s']:.1f} s + bench {run['bench_s']:.1f} s + ending deploy {run['end_deploy_s']:.1f} s + "
            f"overhead {run['overhead_s']:.1f} s ({run['overhead_per_candidate_s']:.2f} s a candidate, "
            f"{run['overhead_pct']:.1f} % of deploy + bench)")


def main() -> int:
    bed = Testbed(1).up(1)
    try:
        place_tiny_model(bed)
        with tempfile.TemporaryDirectory() as tmp:
            searched_dir, grid_dir = Path(tmp, "search"), Path(tmp, "grid")
            searched_dir.mkdir()
            grid_dir.mkdir()
            text = bed.spec_yaml("bench-tune", TOPOLOGY, hosts_used=["tb1"], extra=EXTRA)
            (searched_dir / "spec.yaml").write_text(text)
            (grid_dir / "spec.yaml").write_text(text)
            try:
                searched = tune(searched_dir / "spec.yaml")
                print(line("search", searched), flush=True)
                grid = tune(grid_dir / "spec.yaml", "--grid")
                print(line("grid  ", grid), flush=True)
            finally:
                subprocess.run([sys.executable, "-m", "deployctl", "down", str(searched_dir / "spec.yaml"), "--yes"],
                               capture_output=True, timeout=600)
    finally:
        bed.down()
    same = "the same winner" if searched["winner"] == grid["winner"] else "DIFFERENT winners"
    print(f"search against the full grid: {searched['candidates']} of {grid['candidates']} candidates, "
          f"{searched['wall_s']:.1f} s against {grid['wall_s']:.1f} s "
          f"({100.0 * searched['wall_s'] / grid['wall_s']:.0f} %), {same}")
    worst = max(searched["overhead_pct"], grid["overhead_pct"])
    print(f"overhead beyond deploy + bench: {worst:.1f} % at most (target <= {TARGET_PCT:g} %)")
    return 0 if worst <= TARGET_PCT and searched["winner"] == grid["winner"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
