"""Hostile YAML through the command line: exit 2, one clear located message, no traceback, bounded time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.spec.yaml12 import MAX_DEPTH, MAX_VALUES
from tests.spec.test_locate import billion_laughs

ROOT = Path(__file__).resolve().parents[2]


def deployctl(*args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "deployctl", *args], capture_output=True, text=True, env=environ,
                          cwd=ROOT)


HOSTILE = {
    "alias-bomb": (billion_laughs(), f"1:8: (root): the spec expands to more than {MAX_VALUES} values (YAML aliases?)"),
    "deep-flow": ("[" * 100_000 + "]" * 100_000, f"1:{MAX_DEPTH + 1}: (root): the spec nests deeper than {MAX_DEPTH} levels"),
    "deep-block": ("- " * 100_000 + "x\n", f"1:{2 * MAX_DEPTH + 1}: (root): the spec nests deeper than {MAX_DEPTH} levels"),
    "flat": ("".join(f"- {i}\n" for i in range(MAX_VALUES + 10)),
             f"{MAX_VALUES}:3: (root): the spec has more than {MAX_VALUES} values"),
    "tab": ("version: 1\nhosts:\n\tnode1: {address: a}\n", "3:1: (root): a tab character: YAML indents with spaces only"),
    "python-tag": ("version: 1\nname: !!python/object/apply:os.system [id]\n",
                   "2:7: name: the tag '!!python/object/apply:os.system' is not allowed in a spec"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_validate_refuses_hostile_yaml_with_exit_2(tmp_path: Path, name):
    text, message = HOSTILE[name]
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text)
    result = deployctl("validate", str(spec))
    assert result.returncode == 2 and result.stdout == ""
    assert f"{spec}:{message}" in result.stderr.splitlines()
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["alias-bomb", "deep-flow"])
def test_validate_json_carries_the_refusal(tmp_path: Path, name):
    text, message = HOSTILE[name]
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text)
    result = deployctl("validate", str(spec), "-o", "json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (error,) = json.loads(result.stdout)["errors"]
    assert f"{error['line']}:{error['column']}: {error['path']}: {error['message']}" == message


def test_validate_dev_zero_ends_with_exit_2():
    result = deployctl("validate", "/dev/zero")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "/dev/zero:1:1: (root): the spec file is larger than 4 MiB; a spec is a few KiB of YAML" in result.stderr


def test_validate_binary_file_ends_with_exit_2(tmp_path: Path):
    spec = tmp_path / "binary.yaml"
    spec.write_bytes(b"version: 1\n\xff\xfe\x00\x01")
    result = deployctl("validate", str(spec))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{spec}:2:1: (root): the spec file is not UTF-8 text (byte 0xff)" in result.stderr


def test_plan_refuses_the_alias_bomb_before_contacting_anything(tmp_path: Path):
    spec = tmp_path / "bomb.yaml"
    spec.write_text(billion_laughs())
    result = deployctl("plan", str(spec))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "values (YAML aliases?)" in result.stderr
