"""`generate | deployctl validate -`: the spec read from stdin, every problem at `<stdin>:line:col`; the commands
that act on hosts refuse `-` clearly instead of looking for a file of that name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks/mixed-1host-910b.yaml"


def deployctl(*args: str, stdin: bytes = b"", cwd: Path = ROOT) -> subprocess.CompletedProcess:
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "deployctl", *args], input=stdin, capture_output=True, env=environ,
                          cwd=cwd, timeout=60)


def test_a_valid_spec_on_stdin_is_valid():
    done = deployctl("validate", "-", stdin=PLAYBOOK.read_bytes())
    assert done.returncode == 0 and b"spec is valid" in done.stdout, done.stderr


def test_an_error_names_stdin_line_and_column():
    text = PLAYBOOK.read_text()
    assert "devices: [0, 1]" in text
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "devices: [0, 1]" in row)
    done = deployctl("validate", "-", stdin=text.replace("devices: [0, 1]", "devices: [0, 9]").encode())
    err = done.stderr.decode()
    assert done.returncode == 2 and done.stdout == b"" and "Traceback" not in err
    assert f"<stdin>:{line}:" in err and ": topology.instances[0].devices[1]: 9 is not a device id" in err


def test_json_names_stdin_as_the_file():
    done = deployctl("validate", "-", "--output", "json", stdin=b"version: 1\n")
    document = json.loads(done.stdout)
    assert done.returncode == 2 and not document["valid"]
    assert {e["file"] for e in document["errors"]} == {"<stdin>"} and document["errors"][0]["line"] >= 1


@pytest.mark.parametrize("data,message", [(b"version: 1\nname: \xff\n", "<stdin>:2:7: (root): the spec on stdin is "
                                                                         "not UTF-8 text (byte 0xff)"),
                                          (b"#" * (4 * 1024 * 1024 + 1), "<stdin>:1:1: (root): the spec on stdin is "
                                                                         "larger than 4 MiB")],
                         ids=["not-utf8", "larger-than-4mib"])  # a 4 MiB id reaches PYTEST_CURRENT_TEST: E2BIG
def test_stdin_has_the_files_limits(data, message):
    done = deployctl("validate", "-", stdin=data)
    assert done.returncode == 2 and message in done.stderr.decode()


def test_relative_paths_are_relative_to_the_current_directory(tmp_path):
    (tmp_path / "AscendCloud-6.3.909-20241205.zip").write_bytes(b"")
    done = deployctl("validate", "-", "--output", "json", stdin=PLAYBOOK.read_bytes(), cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["warnings"] == []  # the package is found there
    done = deployctl("validate", "-", "--output", "json", stdin=PLAYBOOK.read_bytes(), cwd=ROOT)
    (warning,) = json.loads(done.stdout)["warnings"]
    assert warning["file"] == "<stdin>" and warning["path"] == "image.build.packages" and warning["line"] > 0
    assert str(ROOT / "AscendCloud-6.3.909-20241205.zip") in warning["message"]


@pytest.mark.parametrize("command", [["plan"], ["export", "--to", "k8s"], ["status"]])
def test_other_commands_refuse_stdin_clearly(command):
    done = deployctl(command[0], "-", *command[1:], stdin=PLAYBOOK.read_bytes())
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err
    assert "SPEC '-' (the spec on stdin) is read by `deployctl validate` only" in err


@pytest.mark.parametrize("redirect,message", [
    ("<&-", "<stdin>: (root): stdin is closed: there is no spec to read"),
    ("0>/dev/null", "<stdin>: (root): cannot read the spec from stdin: Bad file descriptor"),  # opened write-only
], ids=["closed", "write-only"])
def test_stdin_that_cannot_be_read_is_a_located_error(redirect, message):
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "300"}
    done = subprocess.run(["sh", "-c", f'exec "$0" -m deployctl validate - {redirect}', sys.executable],
                          capture_output=True, text=True, env=environ, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr.splitlines()
