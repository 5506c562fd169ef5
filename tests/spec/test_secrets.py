"""`${VAR}` references: env values stay Secrets end to end; the few connection/location keys substitute plainly;
no output (validate, its errors, plan's table and JSON, the argv that reaches a host) ever holds a secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deployctl.core import Secret
from deployctl.plan.up import plan_up
from tests.plan.hostfacts import deployed
from deployctl.spec.load import load_spec_text
from deployctl.ui import UI, render_plan

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"S_WHOLE": "hf_whole_SECRET_1", "S_PART": "part_SECRET_2", "S_A": "a_SECRET_3", "S_B": "b_SECRET_4"}
CONFIG = {"ADDR": "10.200.0.31", "LOGIN": "ma-user", "KEY": "/keys/id_test", "KNOWN": "/keys/known", "JUMP": "bastion",
          "IMAGE": "deployctl/vllm:test", "BASE": "base:1", "PKG": "/pkgs/Ascend.zip", "SRC": "s3://models/m/",
          "ENDPOINT": "http://10.200.0.1:8333", "DEST": "/mnt/weights/m"}
ENVIRON = {**SECRETS, **CONFIG}

SPEC = textwrap.dedent("""\
    version: 1
    name: secrets
    ssh: {user: "${LOGIN}", identity_file: "${KEY}", known_hosts: "${KNOWN}", jump: "${JUMP}"}
    hosts:
      node1: {address: "${ADDR}", user: "${LOGIN}", identity_file: "${KEY}", known_hosts: "${KNOWN}", jump: "${JUMP}"}
    image:
      name: "${IMAGE}"
      build: {base: "${BASE}", packages: "${PKG}"}
    weights: {source: "${SRC}", endpoint: "${ENDPOINT}", dest: "${DEST}"}
    model: {served_name: m, extra_args: [--enforce-eager]}
    topology:
      mode: mixed
      instances:
        - {host: node1, devices: [0, 1], port: 8080}
    env:
      HF_TOKEN: "${S_WHOLE}"
      AUTH: "Bearer ${S_PART}"
      PAIR: "${S_A}:${S_B}"
      LITERAL: "$${NOT_A_REFERENCE}"
    """)


def leaked(text: str) -> list[str]:
    return [value for value in SECRETS.values() if value in text]


def deployctl(spec: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, **ENVIRON, "NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "deployctl", "validate", str(spec), *args], capture_output=True,
                          text=True, env=environ, cwd=ROOT, timeout=60)


def test_env_references_are_secrets_and_connection_keys_plain_values():
    spec = load_spec_text(SPEC, environ=ENVIRON)
    env = {var.name: var for var in spec.env}
    assert {name for name, var in env.items() if var.is_secret} == {"HF_TOKEN", "AUTH", "PAIR"}
    assert env["PAIR"].value.reveal() == "a_SECRET_3:b_SECRET_4" and env["PAIR"].display == "${S_A}:${S_B}"
    assert env["LITERAL"].value == "${NOT_A_REFERENCE}" and not env["LITERAL"].is_secret
    host = spec.hosts[0]
    assert (host.address, host.ssh.user, host.ssh.identity_file, host.ssh.known_hosts, host.ssh.jump) == (
        "10.200.0.31", "ma-user", "/keys/id_test", "/keys/known", "bastion")
    assert (spec.image.name, spec.image.build.base, spec.image.build.packages) == (
        "deployctl/vllm:test", "base:1", "/pkgs/Ascend.zip")
    assert (spec.weights.source, spec.weights.endpoint, spec.weights.dest) == (
        "s3://models/m/", "http://10.200.0.1:8333", "/mnt/weights/m")


def test_the_escape_is_literal_text_anywhere():
    spec = load_spec_text(SPEC.replace("extra_args: [--enforce-eager]", "extra_args: ['--tag=$${HOME}']"),
                          environ=ENVIRON)
    assert spec.model.extra_args == ("--tag=${HOME}",)


@pytest.mark.parametrize("output", ["table", "json"])
def test_validate_never_prints_a_secret(tmp_path: Path, output):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    result = deployctl(spec, "-o", output, "-v")
    assert result.returncode == 0, result.stderr
    assert leaked(result.stdout + result.stderr) == []


@pytest.mark.parametrize("output", ["table", "json"])
def test_validate_errors_never_print_a_secret(tmp_path: Path, output):
    """The same spec with errors near every secret: a refused reference, a bad port, a literal with a newline."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("extra_args: [--enforce-eager]", "extra_args: [--api-key, '${S_WHOLE}']")
                    .replace("port: 8080", "port: 0").replace("name: secrets", "name: '${S_PART}'")
                    + '  BROKEN: "x\\ny"\n')
    result = deployctl(spec, "-o", output)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    shown = result.stdout + result.stderr
    assert "a ${VAR} reference is not allowed here" in shown and "0 is not a port (1-65535)" in shown
    assert leaked(shown) == []


def test_plan_table_json_and_argv_never_hold_a_secret(capsys):
    spec = load_spec_text(SPEC, environ=ENVIRON)
    plan = plan_up(spec, {"node1": deployed((), None, {})})
    render_plan(UI(color=False), plan)
    table = capsys.readouterr().out
    render_plan(UI(output="json"), plan)
    document = capsys.readouterr().out
    argv = [word for step in plan.steps for command in step.commands for word in command.argv]
    puts = [put for step in plan.steps for put in step.puts]
    assert "--env-file" in argv and "docker run" in table and json.loads(document)["deployment"] == "secrets"
    assert leaked(table) == [] and leaked(document) == [] and leaked(" ".join(argv)) == []
    assert leaked(" ".join(put.display() for put in puts)) == []
    # The secrets do travel, through the 0600 env file only.
    (env_file,) = [put for put in puts if isinstance(put.content, Secret)]
    assert env_file.mode == 0o600
    assert sorted(leaked(env_file.content.reveal().decode())) == sorted(SECRETS.values())
