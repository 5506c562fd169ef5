"""The suite collects the same tests every time: xdist's workers each collect it and refuse to run when they
disagree ("Different tests were collected between gw0 and gw1"), which a test id made of the time (a zip's bytes)
or of a set's order (hash randomisation differs per process) does at random."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected(seed: str) -> list[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "PYTHONHASHSEED": seed}
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                          "tests"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_two_collections_with_other_hash_seeds_and_times_agree():
    first, second = collected("1"), collected("2")
    assert len(first) > 3000
    assert first == second, sorted(set(first) ^ set(second))[:5]
