"""`deployctl diagnose` on the test bed (issue 22): a 2-host P/D deployment with secrets in its env and S3
credentials in the environment; the bundle holds every item from both hosts and none of the secrets. A failed
`up` (STANDIN_FAIL_HCCL_TIMEOUT) writes the bundle by itself, names the HCCL timeout and rolls back."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tests.e2e.conftest import MODEL, container_ids

TOKEN = "hf_diag_e2e_7c1d9b2a5e40"
PD = """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9630}
  prefill:
    - {host: tb1, devices: [6, 7], port: 8630}
  decode:
    - {host: tb2, devices: [6, 7], port: 8631}
"""
CONTAINERS = {"tb1": ["e2e-diag-scheduler-0", "e2e-diag-prefill-0"], "tb2": ["e2e-diag-decode-0"]}
PLOG = "/var/log/npu/slog/device-6/device-6_20250601100000.log"


def read_bundle(path: str) -> tuple[str, dict[str, bytes]]:
    with tarfile.open(path) as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    root = Path(path).name.removesuffix(".tar.gz")
    return root, {name.removeprefix(root + "/"): data for name, data in files.items()}


def test_diagnose_collects_every_item_from_both_hosts_and_no_secret(bed, deployctl, monkeypatch):
    s3 = bed.s3.env()
    for key, value in s3.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("E2E_DIAG_TOKEN", TOKEN)
    secrets = [TOKEN, *s3.values()]
    env = ("env: {HF_TOKEN: '${E2E_DIAG_TOKEN}', AWS_SECRET_ACCESS_KEY: '${AWS_SECRET_ACCESS_KEY}', "
           "HCCL_CONNECT_TIMEOUT: '600'}\n")
    path = deployctl.write(bed.spec_yaml("e2e-diag", PD, hosts_used=["tb1", "tb2"], extra=MODEL + env))
    plogs = {name: bed.host(name).dir / "var-log-npu" / PLOG.removeprefix("/var/log/npu/") for name in CONTAINERS}
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        for name, plog in plogs.items():  # a plog that leaked a token, beside a real CANN error
            plog.parent.mkdir(parents=True, exist_ok=True)
            plog.write_text(f"[INFO] RUNTIME(1,python3):2025-06-01-10:00:00.000.000 env HF_TOKEN={TOKEN}\n"
                            f"[ERROR] HCCL(1,python3):2025-06-01-10:02:00.000.000 [hccl_socket_manager.cc:796] "
                            f"[Wait][LinkEstablish]wait socket establish timeout, role[0] rank[1] timeout[120 s] "
                            f"key {s3['AWS_SECRET_ACCESS_KEY']}\n")

        code, doc = deployctl.json("diagnose", path, "--lines", "50")
        assert code == 0, doc
        assert doc["deployment"] == "e2e-diag" and [h["host"] for h in doc["hosts"]] == ["tb1", "tb2"]
        bundle = Path(doc["bundle"])
        assert bundle.parent == path.parent / ".deployctl" / "e2e-diag" and bundle.name.endswith(".tar.gz")
        root, files = read_bundle(doc["bundle"])
        assert {"summary.md", "summary.json"} <= set(files)
        for host in doc["hosts"]:
            name = host["host"]
            wanted = ["npu-smi-info.txt", "df.txt", "memory.txt", "docker-info.txt", "dmesg.txt",
                      f"plog{PLOG}", "state/ranktables/global_ranktable_merge.json"]
            wanted += [f"hccn/npu{d}-{what}.txt" for d in range(8) for what in ("link", "net-health", "ip")]
            for container in CONTAINERS[name]:
                wanted += [f"containers/{container}/{f}" for f in ("inspect.json", "stdout.log", "stderr.log")]
            wanted += [f"state/env/{c}.env" for c in CONTAINERS[name] if "scheduler" not in c]
            if name == "tb1":
                wanted.append("state/history.jsonl")
            missing = [w for w in wanted if f"{name}/{w}" not in files]
            assert missing == [], (name, missing, host["failed"])
            assert set(wanted) <= set(host["collected"])
            failed = {f["item"] for f in host["failed"]}
            assert failed <= {"/etc/hccn.conf"}, host["failed"]  # the bed may have no hccn.conf
            assert ("hccn.conf" in host["collected"]) != ("/etc/hccn.conf" in failed)
            env_file = files[f"{name}/state/env/{CONTAINERS[name][-1]}.env"].decode()
            assert env_file == "HF_TOKEN=<redacted>\nAWS_SECRET_ACCESS_KEY=<redacted>\n"
            inspect = json.loads(files[f"{name}/containers/{CONTAINERS[name][-1]}/inspect.json"])
            assert "HF_TOKEN=<redacted>" in inspect[0]["Config"]["Env"]
            assert {"HCCL_CONNECT_TIMEOUT=600", "NODE_PORTS=8630,8631"} <= set(inspect[0]["Config"]["Env"])
            assert b"startup complete" in files[f"{name}/containers/{CONTAINERS[name][-1]}/stdout.log"]
        assert b'"action": "up"' in files["tb1/state/history.jsonl"]
        for name, data in files.items():
            for secret in secrets:
                assert secret.encode() not in data, f"{secret[:4]}… in {name}"
        hints = {(h["id"], h["host"], h["source"]) for h in doc["hints"]}
        assert {("hccl_connect_timeout", "tb1", f"plog{PLOG}"), ("hccl_connect_timeout", "tb2", f"plog{PLOG}")} <= hints
        summary = files["summary.md"].decode()
        assert "## tb1" in summary and "## tb2" in summary and "hccl_connect_timeout" in summary

        code, out, err = deployctl("diagnose", path)  # the table: the path and the top hints
        assert code == 0 and "bundle: " in out and f"hccl_connect_timeout in tb1/plog{PLOG}" in out
    finally:
        for plog in plogs.values():
            plog.unlink(missing_ok=True)
        deployctl("down", path, "--yes")
        for host in ("tb1", "tb2"):  # its env files hold the S3 secret on purpose: other tests grep for it
            bed.run_on(host, ["rm", "-rf", "/var/lib/deployctl/e2e-diag"])


MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb3, devices: [6, 7], port: 8634}\n"


def test_failed_up_writes_the_bundle_prints_the_hccl_hint_and_rolls_back(bed, deployctl):
    good = bed.spec_yaml("e2e-diagup", MIXED, hosts_used=["tb3"], extra=MODEL)
    path = deployctl.write(good)
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        before = container_ids(bed, "tb3", "e2e-diagup")

        path.write_text(good + "env: {STANDIN_FAIL_HCCL_TIMEOUT: '1'}\n")
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 1
        assert "diagnose bundle: " in err and "hccl_exec_timeout" in err and "HCCL_EXEC_TIMEOUT" in err
        assert err.index("diagnose bundle: ") < err.index("error: ")  # the deploy's own error is said last
        bundle = next(line.split("diagnose bundle: ", 1)[1].strip() for line in err.splitlines()
                      if "diagnose bundle: " in line)
        root, files = read_bundle(bundle)
        summary = json.loads(files["summary.json"])
        assert summary["hints"][0]["id"] == "hccl_exec_timeout" and summary["hints"][0]["source"] == "up-error.txt"
        assert b"EI0002" in files["up-error.txt"] and "tb3/containers/e2e-diagup-mixed-0/inspect.json" in files
        assert container_ids(bed, "tb3", "e2e-diagup") == before  # rolled back: the previous one serves again

        code, doc = deployctl.json("up", path, "--skip", "weights", "--yes")
        assert code == 1 and doc["ok"] is False
        assert Path(doc["error"]["diagnose"]["bundle"]).exists()
        assert [h["id"] for h in doc["error"]["diagnose"]["hints"]] == ["hccl_exec_timeout"]
        assert container_ids(bed, "tb3", "e2e-diagup") == before
    finally:
        deployctl("down", path, "--yes")
