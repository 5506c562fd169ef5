"""`up` re-run on 8 hosts with nothing to change (target <= 0.81 s) and `plan` on 8 hosts (target <= 0.71 s).

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/up_noop.py
    [--baseline REV]
Brings up an 8-host test bed, deploys one mixed instance per host with the stand-in image, then times the real
CLI (a new process each time, as users run it). With --baseline, the same commands of deployctl at git revision
REV (a worktree, imported through PYTHONPATH) are timed in the same run, interleaved, on the same bed: the
figures to keep or beat. Prints each figure, its target and PASS/FAIL; exit 1 on a miss.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import Testbed  # noqa: E402
from tests.testbed.demo import place_tiny_model  # noqa: E402

HOSTS = 8
UP_NOOP_TARGET_S = 0.81
PLAN_TARGET_S = 0.71


def spec_text(bed: Testbed) -> str:
    instances = "".join(f"    - {{host: tb{i}, devices: [0, 1], port: 8480}}\n" for i in range(1, HOSTS + 1))
    return bed.spec_yaml(
        "bench-noop",
        "topology:\n  mode: mixed\n  instances:\n" + instances,
        extra="image: {name: deployctl/standin-vllm:latest}\n"
              "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
              "model: {served_name: tiny, max_model_len: 2048, max_num_batched_tokens: 2048}\n",
    )


def timed(argv: list[str], runs: int = 5, env: dict | None = None) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        # cwd: not the checkout, whose deployctl/ `python -m` would import ahead of the baseline's PYTHONPATH
        result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{result.stderr}")
    return statistics.median(times)


def baseline_tree(revision: str, into: Path) -> dict:
    """A worktree of deployctl at `revision`; the environment that makes `python -m deployctl` import it."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), revision], check=True,
                   capture_output=True)
    return {**os.environ, "PYTHONPATH": str(into)}



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="also time deployctl at this git revision, same run")
    args = parser.parse_args()
    bed = Testbed(HOSTS).up(HOSTS)
    figures: dict[str, tuple[float, float]] = {}
    try:
        place_tiny_model(bed)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "spec.yaml"
            spec.write_text(spec_text(bed))
            cli = [sys.executable, "-m", "deployctl"]
            start = time.perf_counter()
            subprocess.run([*cli, "up", str(spec), "--skip", "weights", "--yes"], check=True, capture_output=True)
            first = time.perf_counter() - start
            trees = {"this tree": None}
            if args.baseline:
                trees[f"baseline {args.baseline}"] = baseline_tree(args.baseline, Path(tmp) / "baseline")
            for _ in range(2):  # interleaved rounds: the machine's load falls on both alike
                for label, env in trees.items():
                    noop = timed([*cli, "up", str(spec), "--skip", "weights"], env=env)
                    # every baseline worth comparing has --skip (without it a baseline's plan asks the store for
                    # the weights and, with no credentials here, stops)
                    plan = timed([*cli, "plan", str(spec), "--skip", "weights"], env=env)
                    best = figures.get(label, (noop, plan))
                    figures[label] = (min(best[0], noop), min(best[1], plan))
            subprocess.run([*cli, "down", str(spec), "--yes"], capture_output=True)
            if args.baseline:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "baseline")],
                               capture_output=True)
    finally:
        bed.down()
    noop, plan = figures["this tree"]
    ok = noop <= UP_NOOP_TARGET_S and plan <= PLAN_TARGET_S
    print(f"first up, {HOSTS} hosts (8 containers + health + smoke): {first:.2f} s")
    for label, (n, p) in figures.items():
        print(f"{label}: no-op up {n:.2f} s, plan {p:.2f} s (medians of 5, best of 2 interleaved rounds)")
    print(f"no-op up, {HOSTS} hosts: {noop:.2f} s (target <= {UP_NOOP_TARGET_S} s) "
          f"{'PASS' if noop <= UP_NOOP_TARGET_S else 'FAIL'}")
    print(f"plan, {HOSTS} hosts: {plan:.2f} s (target <= {PLAN_TARGET_S} s) {'PASS' if plan <= PLAN_TARGET_S else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
