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


def collected_with(markexpr: str) -> set[str]:
    """The test files of tests/real_engine that `-m markexpr` collects."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                          *(["-m", markexpr] if markexpr else []), "tests/real_engine"],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode in (0, 5), run.stdout[-2000:] + run.stderr[-2000:]
    return {line.split("::")[0] for line in run.stdout.splitlines() if "::" in line}


def test_the_real_engine_tune_runs_only_when_its_own_marker_is_named():
    """`-m real_engine` (.ci/run's real-engine stage) leaves the tune out; `-m real_engine_tune` (its own stage) runs
    it alone; the default run has neither."""
    tune = "tests/real_engine/test_tune.py"
    assert collected_with("") == set()
    engine = collected_with("real_engine")
    assert "tests/real_engine/test_up.py" in engine and tune not in engine, engine
    assert collected_with("real_engine_tune") == {tune}
    assert tune in collected_with("real_engine or real_engine_tune")
