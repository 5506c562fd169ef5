"""write_bundle end to end on this machine (a `local` host, fake npu-smi/hccn_tool/docker on PATH): one batch,
the tar.gz read back, nothing secret in it."""

import json
import os
import tarfile

import pytest

from deployctl.diagnose.collect import write_bundle
from deployctl.transport.local import LocalTransport
from tests.diagnose.test_plan import BASE
from deployctl.spec.load import check_spec_text

SECRET = "hf_diag_secret_4711"

FAKES = {
    "npu-smi": 'echo "| 0     910B3               | OK            | 98.4        44                0    / 0             |"',
    "hccn_tool": 'case "$3" in -link) echo "link status: DOWN";; -net_health) echo "net health status: Success";; '
                 '*) echo "ipaddr:10.201.1.1$2";; esac',
    "docker": f"""case "$1" in
  info) echo "Server Version: 24.0.7";;
  ps) echo "diag-mixed-0";;
  inspect) echo '[{{"Name": "/diag-mixed-0", "Config": {{"Env": ["HF_TOKEN={SECRET}", "ASCEND_RT_VISIBLE_DEVICES=0"]}}}}]';;
  logs) echo "2025-01-01T00:00:00Z starting with token {SECRET}"; echo "EI0006: Getting socket times out." >&2;;
esac""",
}


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def test_write_bundle_on_a_local_host(tmp_path, fake_tools):
    text = BASE.replace("h1: {address: 192.0.2.11}", "h1: {address: local}") + "env: {HF_TOKEN: '${TOKEN}'}\n"
    spec, errors, _ = check_spec_text(text, str(tmp_path / "spec.yaml"), tmp_path, {"TOKEN": SECRET})
    assert not errors
    result = write_bundle(spec, {"h1": LocalTransport("h1")}, lines=20,
                          unreachable_hosts={"h2": "h2 (192.0.2.12): connection refused"},
                          context={"up-error.txt": f"failed with {SECRET}\n"}, environ={})
    assert result.path.parent == tmp_path / ".deployctl" / "diag" and result.path.name.startswith("diagnose-")
    assert oct(result.path.stat().st_mode & 0o777) == "0o600"
    root = result.path.name.removesuffix(".tar.gz")
    with tarfile.open(result.path) as archive:
        names = set(archive.getnames())
        contents = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    for path in ("summary.md", "summary.json", "up-error.txt", "h1/npu-smi-info.txt", "h1/hccn/npu1-ip.txt",
                 "h1/df.txt", "h1/memory.txt", "h1/docker-info.txt", "h1/containers/diag-mixed-0/inspect.json",
                 "h1/containers/diag-mixed-0/stdout.log", "h1/containers/diag-mixed-0/stderr.log"):
        assert f"{root}/{path}" in names, path
    assert all(SECRET.encode() not in data for data in contents.values())
    summary = json.loads(contents[f"{root}/summary.json"])
    assert [h["host"] for h in summary["hosts"]] == ["h1", "h2"]
    assert summary["hosts"][1]["failed"] == [{"item": "ssh", "reason": "h2 (192.0.2.12): connection refused"}]
    ids = {(h["id"], h["source"]) for h in summary["hints"]}
    assert ("npu_link_down", "hccn/npu0-link.txt") in ids
    assert ("hccl_connect_timeout", "containers/diag-mixed-0/stderr.log") in ids
    assert result.to_json()["bundle"] == str(result.path) and "created" not in result.to_json()
