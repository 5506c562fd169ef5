"""Secrets in exports: a literal under a name that says secret is refused (the list `validate` warns by), and a
DP group's `${VAR}` becomes a secretKeyRef as the spec's does."""

from __future__ import annotations

import re

import pytest

from deployctl.cli import main
from deployctl.export.options import ExportOptions
from deployctl.export.render import export, stream
from deployctl.spec.load import load_spec_text
from tests.export.cases import ROOT

PLAYBOOK = ROOT / "playbooks/vllm-ascend-mixed-ep-1host.yaml"
GROUP = "port: 8000}"
VALUE = "literal-secret-value-0123"


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("where,path", [("spec", "env"), ("group", "topology.groups[0].env")])
@pytest.mark.parametrize("name", ["PRIVATE_KEY", "AUTHORIZATION", "AUTH_HEADER", "PASSPHRASE", "MYSQL_PWD",
                                  "OPENAI_KEY"])
def test_a_literal_under_a_secret_name_is_refused(tmp_path, capsys, where, path, name):
    text = PLAYBOOK.read_text()
    text = (text + f"env: {{{name}: {VALUE}}}\n" if where == "spec"
            else text.replace(GROUP, f"port: 8000, env: {{{name}: {VALUE}}}}}"))
    spec = _write(tmp_path, text)
    assert main(["export", spec, "--to", "lws", "--weights-pvc", "models", "--secret", "tokens",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    located = [line for line in err.splitlines() if re.match(rf"{re.escape(spec)}:\d+:\d+: ", line)]
    assert len(located) == 1 and f": {path}.{name}: " in located[0] and "in the clear" in located[0], err
    assert not (tmp_path / "out").exists()


def test_a_group_secret_becomes_a_secret_key_ref():
    text = PLAYBOOK.read_text().replace(GROUP, 'port: 8000, env: {MOONCAKE_TOKEN: "${MT}", HCCL_BUFFSIZE: 512}}')
    spec = load_spec_text(text, environ={"MT": VALUE})
    manifests = export(spec, ExportOptions(target="lws", weights_pvc="models", secret="tokens"))
    (server,) = [c for m in manifests if m.kind == "LeaderWorkerSet"
                 for c in m.body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]]
    env = {e["name"]: e for e in server["env"]}
    assert env["MOONCAKE_TOKEN"] == {"name": "MOONCAKE_TOKEN",
                                     "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "MOONCAKE_TOKEN"}}}
    assert env["HCCL_BUFFSIZE"] == {"name": "HCCL_BUFFSIZE", "value": "512"}
    assert VALUE not in stream(manifests)


def test_a_group_secret_without_secret_flag_is_refused_at_the_group(tmp_path, capsys):
    text = PLAYBOOK.read_text().replace(GROUP, 'port: 8000, env: {MOONCAKE_TOKEN: "${MT}"}}')
    spec = _write(tmp_path, text)
    assert main(["export", spec, "--to", "lws", "--weights-pvc", "models"]) == 2
    assert ": topology.groups[0].env.MOONCAKE_TOKEN: " in capsys.readouterr().err
