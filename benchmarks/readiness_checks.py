"""What the truthful-readiness stages add to `up` of the 2-host demo (issue 22; target < 2 s): the in-container
contract (one `docker exec` per worker) and the all-pairs answer check (every serving path from the front's host).

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/readiness_checks.py
Brings up the 2-host test bed, deploys playbooks/demo-pd.yaml (the tiny model placed on the hosts, weights stage
skipped) from nothing with every stage and with `--skip contract,answers`, interleaved, `down` between runs;
prints the median of each and their difference, with PASS/FAIL against the target; exit 1 on a miss.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.up_noop import place_tiny_model  # noqa: E402
from tests.testbed import Testbed  # noqa: E402

HOSTS = 2
ROUNDS = 5
TARGET_S = 2.0


def demo_spec(bed: Testbed) -> str:
    """playbooks/demo-pd.yaml as it is, its model directory where place_tiny_model puts the model."""
    text = (ROOT / "playbooks" / "demo-pd.yaml").read_text()
    return text.replace("dest: /srv/weights/demo-tiny", "dest: /srv/weights/tiny")


def up_seconds(cli: list[str], spec: Path, *skip: str) -> float:
    start = time.perf_counter()
    result = subprocess.run([*cli, "up", str(spec), "--yes", "--skip", ",".join(("weights", *skip))],
                            capture_output=True, text=True, cwd=tempfile.gettempdir())
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"up failed:\n{result.stdout}{result.stderr}")
    down = subprocess.run([*cli, "down", str(spec), "--yes"], capture_output=True, text=True)
    if down.returncode != 0:
        raise SystemExit(f"down failed:\n{down.stderr}")
    return seconds


def main() -> int:
    bed = Testbed(HOSTS).up(HOSTS)
    with_checks, without = [], []
    try:
        place_tiny_model(bed)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "demo-pd.yaml"
            spec.write_text(demo_spec(bed))
            cli = [sys.executable, "-m", "deployctl"]
            up_seconds(cli, spec)  # warm-up: page cache, the engines' first container start
            for _ in range(ROUNDS):
                with_checks.append(up_seconds(cli, spec))
                without.append(up_seconds(cli, spec, "contract", "answers"))
    finally:
        bed.down()
    full, bare = statistics.median(with_checks), statistics.median(without)
    added = full - bare
    print(f"up of the demo, every stage: median {full:.2f} s ({', '.join(f'{s:.2f}' for s in with_checks)})")
    print(f"up of the demo, --skip contract,answers: median {bare:.2f} s ({', '.join(f'{s:.2f}' for s in without)})")
    print(f"added by the contract and the answer check: {added:.2f} s (target < {TARGET_S} s) "
          f"{'PASS' if added < TARGET_S else 'FAIL'}")
    return 0 if added < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
