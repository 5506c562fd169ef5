"""tests/conftest.py: a run whose test bed is unavailable says so in one line, never passing for a green run."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_skipped_test_bed_tests_are_counted_in_one_line(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from tests.conftest import _unavailable, pytest_terminal_summary\n"
        "@pytest.fixture(scope='session')\n"
        "def testbed():\n"
        "    _unavailable('needs root (network namespaces, mounts, dockerd)')\n")
    (tmp_path / "test_uses_bed.py").write_text(
        "import pytest\n"
        "def test_one(testbed): pass\n"
        "def test_two(testbed): pass\n"
        "def test_plain(): pass\n"
        "def test_other_skip(): pytest.skip('unrelated')\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "test bed tests skipped" in line]
    assert lines == ["2 test bed tests skipped: needs root (network namespaces, mounts, dockerd)"]
