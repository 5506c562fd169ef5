"""`deployctl validate` as a user runs it: exit codes, the JSON document, stderr without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.spec.corpus import SPECS

ROOT = Path(__file__).resolve().parents[2]


def deployctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160", **(env or {})}
    return subprocess.run([sys.executable, "-m", "deployctl", *args], capture_output=True, text=True,
                          env=environ, cwd=ROOT)


def test_valid_spec_prints_the_layout_and_exits_0():
    result = deployctl("validate", "tests/fixtures/specs/examples/pd-1host.yaml")
    assert result.returncode == 0, result.stderr
    for text in ("llama2-13b-pd-prefill-0", "llama2-13b-pd-decode-0", "llama2-13b-pd-scheduler-0", "4,5", "6,7",
                 "NODE_PORTS: 8088,8089", "start order: [llama2-13b-pd-prefill-0, llama2-13b-pd-decode-0]  ->  "
                 "[llama2-13b-pd-scheduler-0]", "spec is valid: 3 containers on 1 host"):
        assert text in result.stdout
    assert result.stderr == ""


def test_valid_spec_json_document():
    result = deployctl("validate", "tests/fixtures/specs/examples/pd-1host.yaml", "--output", "json")
    assert result.returncode == 0
    assert json.loads(result.stdout) == {
        "valid": True, "errors": [], "warnings": [],
        "summary": {"instances": [
            {"name": "llama2-13b-pd-prefill-0", "role": "prefill", "host": "node1", "devices": [4, 5], "port": 8088, "tp": 2},
            {"name": "llama2-13b-pd-decode-0", "role": "decode", "host": "node1", "devices": [6, 7], "port": 8089, "tp": 2},
            {"name": "llama2-13b-pd-scheduler-0", "role": "scheduler", "host": "node1", "devices": [], "port": 9000, "tp": None},
        ]},
    }


def test_invalid_spec_lists_every_error_on_stderr_and_exits_2():
    spec = "tests/fixtures/specs/many/schema-and-rule.yaml"
    result = deployctl("validate", spec)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[:4] == [
        "error: invalid spec: 3 errors",
        f"{spec}:10:50: topology.instances[0].devcies: unknown key 'devcies' — did you mean 'devices'?",
        f"{spec}:11:31: topology.instances[1].devices[0]: 8 is not a device id (cards: 0-7)",
        "  hint: requirements.cards sets how many devices each host has",
    ]
    assert "Traceback" not in result.stderr


def test_invalid_spec_json_document_on_stdout_exit_2():
    spec = "tests/fixtures/specs/invalid/device-out-of-range.yaml"
    result = deployctl("validate", spec, "-o", "json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert json.loads(result.stdout) == {
        "valid": False,
        "errors": [{"file": spec, "line": 10, "column": 34, "path": "topology.instances[0].devices[1]",
                    "message": "8 is not a device id (cards: 0-7)",
                    "hint": "requirements.cards sets how many devices each host has"}],
        "warnings": [],
        "summary": {"instances": []},
    }


def test_warnings_are_shown_and_do_not_fail():
    result = deployctl("validate", "tests/fixtures/specs/warnings/nearest-memory-class.yaml")
    assert result.returncode == 0
    assert "warning: tests/fixtures/specs/warnings/nearest-memory-class.yaml:7:47: model.max_model_len: " \
           "max_model_len 16384 exceeds 8K (8192)" in result.stderr
    document = json.loads(deployctl("validate", "tests/fixtures/specs/warnings/nearest-memory-class.yaml",
                                    "-o", "json").stdout)
    assert document["valid"] is True and [w["path"] for w in document["warnings"]] == [
        "requirements.gpu_memory_gb", "model.max_model_len"]


def test_missing_spec_file_is_a_clear_error():
    result = deployctl("validate", "no/such/spec.yaml")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no/such/spec.yaml: (root): cannot read the spec file: No such file or directory" in result.stderr


def test_secret_values_are_never_printed(tmp_path):
    spec = tmp_path / "secret.yaml"
    spec.write_text((SPECS / "examples" / "mixed-1host.yaml").read_text() + "env:\n  HF_TOKEN: ${DEPLOYCTL_T}\n")
    for output in ("table", "json"):
        result = deployctl("validate", str(spec), "-o", output, "-v", env={"DEPLOYCTL_T": "tok-s3cr3t-XYZ"})
        assert result.returncode == 0
        assert "tok-s3cr3t-XYZ" not in result.stdout + result.stderr


def test_validate_opens_no_connection():
    """A bad spec is reported before anything that could reach a host is even imported."""
    code = (
        "import sys; from deployctl.cli import main;"
        f"rc = main(['validate', {str(SPECS / 'many' / 'pd-everything-wrong.yaml')!r}]);"
        "loaded = {'paramiko', 'boto3', 'docker', 'deployctl.transport', 'deployctl.transport.ssh'} & set(sys.modules);"
        "print(rc, sorted(loaded))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.strip() == "2 []", result.stderr


def test_scheduler_row_shows_no_tp_size():
    """The scheduler holds no devices: its devices and TP cells say "-" (it runs with the P/D TP internally)."""
    result = deployctl("validate", "tests/fixtures/specs/examples/pd-1host.yaml")
    rows = {line.split()[2]: line.split() for line in result.stdout.splitlines() if "llama2-13b-pd-" in line}
    assert rows["llama2-13b-pd-scheduler-0"][3] == "-" and rows["llama2-13b-pd-scheduler-0"][-1] == "-"
    assert rows["llama2-13b-pd-prefill-0"][-1] == "2"


def test_every_playbook_validates_with_exit_0():
    for path in sorted((ROOT / "playbooks").glob("*.yaml")):
        result = deployctl("validate", str(path.relative_to(ROOT)))
        assert result.returncode == 0, (path, result.stderr)


def test_missing_local_package_is_a_warning_naming_the_resolved_path(tmp_path):
    playbook = (ROOT / "playbooks" / "mixed-1host-910b.yaml").read_text()
    spec = tmp_path / "mixed.yaml"
    spec.write_text(playbook)
    missing = tmp_path / "AscendCloud-6.3.909-20241205.zip"
    result = deployctl("validate", str(spec))
    assert result.returncode == 0 and "spec is valid" in result.stdout
    line = next(n for n, text in enumerate(playbook.splitlines(), 1) if "packages:" in text)
    assert f"warning: {spec}:{line}:15: image.build.packages: {missing}: no such file on this machine" \
        in result.stderr
    document = json.loads(deployctl("validate", str(spec), "-o", "json").stdout)
    assert document["valid"] is True
    assert [(w["path"], w["line"]) for w in document["warnings"]] == [("image.build.packages", line)]

    missing.write_bytes(b"PK")  # present (its contents are `image build`'s business): no warning
    result = deployctl("validate", str(spec))
    assert result.returncode == 0 and "image.build.packages" not in result.stderr


def test_up_and_image_build_refuse_a_missing_local_package_before_connecting(tmp_path):
    """The host is a closed loopback port: reaching it would fail differently (exit 1, a connection error)."""
    text = (ROOT / "playbooks" / "mixed-1host-910b.yaml").read_text().replace("192.0.2.11", "127.0.0.1")
    spec = tmp_path / "mixed.yaml"
    spec.write_text(text + "ssh: {port: 1}\n")
    missing = tmp_path / "AscendCloud-6.3.909-20241205.zip"
    for argv in (["up", str(spec)], ["up", str(spec), "--dry-run"], ["image", "build", str(spec)]):
        result = deployctl(*argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert f"error: image.build.packages: {missing}: no such file" in result.stderr
        assert "connect" not in result.stderr and "Traceback" not in result.stderr
