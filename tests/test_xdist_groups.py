"""The suite's two xdist workers keep each test bed group on one worker, the two groups on two (tests/conftest.py).

Grouping was lost once without a word (pytest 9.2's node ids, pytest-dev/pytest-xdist#1386): the bed's tests ran on
both workers and two beds tore down each other's namespaces. This runs a small suite of its own under
`-n 2 --dist loadgroup` with tests/conftest.py as a plugin: tests that ask for `testbed` (here a stand-in fixture of
the probe's own, so no bed starts) must report one worker per group and a different one for each group, while plain
tests spread over both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = '''
import json, os, pytest

TESTBED_GROUP = {group!r}

@pytest.fixture
def testbed():
    return os.environ["PYTEST_XDIST_WORKER"]

def record(kind, name):
    path = os.path.join(os.environ["PROBE_OUT"], name)
    with open(path, "w") as f:
        json.dump([kind, os.environ["PYTEST_XDIST_WORKER"]], f)

@pytest.mark.parametrize("i", range(6))
def test_bed(testbed, i):
    record("bed", f"{__name__}-bed-{i}")

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    record("plain", f"{__name__}-plain-{i}")
'''


def test_every_bed_test_runs_on_one_worker_and_the_others_spread(tmp_path):
    for name, group in (("test_probe_a.py", "testbed"), ("test_probe_b.py", "testbed2")):
        (tmp_path / name).write_text(PROBE.replace("{group!r}", repr(group)))
    out = tmp_path / "out"
    out.mkdir()
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-q", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=300,
        env={**_env(), "PROBE_OUT": str(out), "PYTHONPATH": str(root)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    records = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    assert len(records) == 24
    beds = [{worker for name, (kind, worker) in records.items() if kind == "bed" and name.startswith(module)}
            for module in ("test_probe_a", "test_probe_b")]
    all_workers = {worker for _, worker in records.values()}
    assert [len(workers) for workers in beds] == [1, 1], f"a bed group's tests ran on {beds}"
    assert beds[0] != beds[1], f"both bed groups ran on {beds[0]}: the two beds did not run side by side"
    assert all_workers == {"gw0", "gw1"}, f"the run used {sorted(all_workers)}: nothing showed the groups hold"


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
