"""Hostile specs (issue 17) through the real command line: `validate` and `plan` exit 2 with the located
message, print no traceback and no secret, and `plan` stops at validation before any host is contacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spec.corpus import ENVIRON, SPECS, expectations

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ("secret-in-extra-args", "secret-in-name", "secret-in-family", "secret-in-instance-host",
           "env-secret-newline", "env-literal-control", "served-name-traversal", "served-name-triton-colon",
           "host-name-path", "weights-source-ftp", "weights-paths-relative", "packages-https",
           "same-address-two-names", "same-machine-local", "ssh-port-too-high", "max-num-seqs-zero",
           "gpu-memory-zero", "served-name-empty", "device-negative", "enum-quantization", "port-too-high",
           "devices-empty", "type-cards-word", "name-pattern", "env-bad-name",
           # the keys added in round 38 get the old keys' checkers (issue 39)
           "front-image-space", "front-image-dash", "cache-dir-dotdot", "cache-dir-double-slash", "free-json-nan",
           "va-proxy-on-kv-port-16")
SECRET_VALUES = [value for name, value in ENVIRON.items() if "TOKEN" in name]


def deployctl(*args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, **ENVIRON, "NO_COLOR": "1", "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "deployctl", *args], capture_output=True, text=True, env=environ,
                          cwd=ROOT, timeout=60)


def expected_lines(spec: Path) -> list[str]:
    return [f"{spec}:{e.line}:{e.column}: {e.path}: {e.message}"
            for e in expectations(spec.read_text(encoding="utf-8")) if e.severity == "expect"]


@pytest.mark.parametrize("command", ["validate", "plan"])
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_spec_exits_2_with_its_located_message(name, command):
    spec = SPECS / "invalid" / f"{name}.yaml"
    result = deployctl(command, str(spec))
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    for line in expected_lines(spec):
        assert any(line in printed for printed in result.stderr.splitlines()), (line, result.stderr)
    # plan refused the spec itself: nothing after validation (facts, SSH) was reached
    assert result.stderr.startswith("error: invalid spec:")
    for secret in SECRET_VALUES:
        assert secret not in result.stderr and repr(secret)[1:-1] not in result.stderr


@pytest.mark.parametrize("name", ["secret-in-extra-args", "secret-in-name", "env-secret-newline"])
def test_validate_json_names_the_key_and_never_the_value(name):
    spec = SPECS / "invalid" / f"{name}.yaml"
    result = deployctl("validate", str(spec), "-o", "json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    rendered = [f"{spec}:{e['line']}:{e['column']}: {e['path']}: {e['message']}" for e in document["errors"]]
    assert rendered == expected_lines(spec)
    for secret in SECRET_VALUES:
        assert secret not in result.stdout and repr(secret)[1:-1] not in result.stdout
