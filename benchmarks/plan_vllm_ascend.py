"""`plan` of a 2-node vllm-ascend P/D (Mooncake, external DP: 2 prefill ranks, 4 decode ranks, the proxy) on the
test bed: target < 1 s, before the deployment exists and once it runs.

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/plan_vllm_ascend.py
Brings up a 2-host test bed with 16 emulated NPUs per host, times the real CLI (a new process each run, as users
run it; median of 5), deploys with `up`, and times `plan` again. Prints each figure, its target and PASS/FAIL;
exit 1 on a miss.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.up_noop import place_tiny_model, timed  # noqa: E402
from tests.testbed import Testbed  # noqa: E402

HOSTS = 2
PLAN_TARGET_S = 1.0
TOPOLOGY = """topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: tb1, port: 8500}
  prefill:
    - {hosts: [tb1], dp: 2, tp: 8, expert_parallel: true, port: 9500}
  decode:
    - {hosts: [tb2], dp: 4, tp: 4, expert_parallel: true, port: 9500}
"""


def spec_text(bed: Testbed) -> str:
    return bed.spec_yaml("bench-va-pd", TOPOLOGY, extra=(
        "server: vllm-ascend\nrequirements: {cards: 16}\n"
        "image: {name: deployctl/standin-vllm:latest}\n"
        "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
        "model: {served_name: tiny, max_model_len: 2048, max_num_batched_tokens: 2048}\n"))


def main() -> int:
    bed = Testbed(HOSTS).up(HOSTS)
    try:
        place_tiny_model(bed)
        for host in bed.hosts:
            bed.set_profile(host.name, cards=16)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "spec.yaml"
            spec.write_text(spec_text(bed))
            cli = [sys.executable, "-m", "deployctl"]
            fresh = timed([*cli, "plan", str(spec), "--skip", "weights"])
            up = subprocess.run([*cli, "up", str(spec), "--skip", "weights", "--yes"], capture_output=True, text=True)
            if up.returncode != 0:
                print(up.stdout + up.stderr)
                raise SystemExit("up failed: no figure for a running deployment")
            running = timed([*cli, "plan", str(spec), "--skip", "weights"])
            subprocess.run([*cli, "down", str(spec), "--yes"], capture_output=True)
    finally:
        bed.down()
    for label, figure in (("plan, nothing deployed (7 containers to create)", fresh),
                          ("plan, deployment running (nothing to change)", running)):
        print(f"{label}: {figure:.2f} s (target < {PLAN_TARGET_S} s) {'PASS' if figure < PLAN_TARGET_S else 'FAIL'}")
    return 0 if max(fresh, running) < PLAN_TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
