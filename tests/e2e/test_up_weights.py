"""`up` end to end with every stage (issue 19 item 2): checks -> image build -> weights from the bed's S3 ->
ranktables -> containers -> health -> smoke, through the CLI; a second `up` changes nothing."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.e2e.conftest import container_ids
from tests.image.packages import package, package_name
from tests.testbed.demo import tiny_model

PREFIX = "e2e-upw/"
DEST = "/srv/weights/e2e-upw"
IMAGE = "deployctl/e2e-upw:1"
HOSTS = ["tb1", "tb2"]
TOPOLOGY = """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9510}
  prefill:
    - {host: tb1, devices: [4, 5], port: 8510}
  decode:
    - {host: tb2, devices: [4, 5], port: 8511}
"""


@pytest.fixture
def s3_model(bed, monkeypatch):
    """The tiny model under e2e-upw/ on the bed's S3, credentials exported as the demo does; hosts wiped."""
    client = bed.s3.client()
    files = tiny_model()
    for name, data in files.items():
        client.put_object(Bucket=bed.s3.bucket, Key=PREFIX + name, Body=data)
    for key, value in bed.s3.env().items():
        monkeypatch.setenv(key, value)
    clean(bed)
    yield files
    clean(bed)
    for name in files:
        client.delete_object(Bucket=bed.s3.bucket, Key=PREFIX + name)


def clean(bed):
    for host in HOSTS:
        bed.run_on(host, ["rm", "-rf", DEST], check=False)
        bed.docker_on(host, "image", "rm", "--force", IMAGE, check=False)


def host_files(bed, host) -> dict:
    """path -> sha256 of every file under DEST on a host, the manifest included (its name kept)."""
    out = bed.run_on(host, ["sh", "-c", 'cd "$1" && find . -type f -exec sha256sum {} +', "sh", DEST]).stdout
    return {line.split()[1][2:]: line.split()[0] for line in out.splitlines()}


def built_image_and_s3_weights(bed, deployctl, where: str = "each-host") -> str:
    """The spec's image (built from a synthetic package written beside the spec), weights and model keys."""
    (deployctl.tmp_path / package_name()).write_bytes(package())
    return (f"image:\n  name: {IMAGE}\n  build: {{base: '{bed.standin_image}', packages: {package_name()}, "
            f"where: {where}}}\n"
            f"weights: {{source: s3://{bed.s3.bucket}/{PREFIX}, endpoint: {bed.s3.endpoint}, dest: {DEST}}}\n"
            "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n")


def test_up_runs_every_stage_with_weights_from_s3_and_a_rerun_executes_nothing(bed, deployctl, s3_model):
    extra = ("requirements: {driver: '23.0.6', cards: 8, npu_memory_gb: 64, ip_forward: true}\n"
             + built_image_and_s3_weights(bed, deployctl))
    path = deployctl.write(bed.spec_yaml("e2e-upw", TOPOLOGY, hosts_used=HOSTS, extra=extra))
    try:
        code, out, err = deployctl("up", path, "--yes", "--output", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["changed"] is True and doc["endpoint"] == "http://10.200.0.11:9510"
        assert [(i["name"], i["state"], i["healthy"]) for i in doc["instances"]] == [
            ("e2e-upw-prefill-0", "running", True), ("e2e-upw-decode-0", "running", True),
            ("e2e-upw-scheduler-0", "running", True)]
        assert doc["smoke"]["e2e-upw-scheduler-0"]
        assert "skipped stage" not in err
        # Each stage said what it did, in order: the image built on both hosts, the weights moved to both.
        total = sum(len(d) for d in s3_model.values())
        stages = [err.index("stage image: built/shipped on tb1, tb2"),
                  err.index(f"stage weights: 2 host(s) hold 3 files, {2 * total} bytes transferred")]
        assert stages == sorted(stages)

        expected = {name: hashlib.sha256(data).hexdigest() for name, data in s3_model.items()}
        for host in HOSTS:
            held = host_files(bed, host)
            manifest = json.loads(bed.run_on(host, ["cat", f"{DEST}/.deployctl-manifest.json"]).stdout)
            assert manifest["source"] == f"s3://{bed.s3.bucket}/{PREFIX}"
            assert {p: e["sha256"] for p, e in manifest["files"].items()} == expected
            assert {p: d for p, d in held.items() if not p.startswith(".deployctl-")} == expected
            assert bed.docker_on(host, "image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
        # The containers read the model the weights stage wrote (mounted at dest).
        mounted = bed.docker_on("tb2", "exec", "e2e-upw-decode-0", "cat", f"{DEST}/config.json").stdout
        assert mounted.encode() == s3_model["config.json"]
        # The ranktables stage wrote the P/D global ranktable: prefill on tb1, decode on tb2, device IPs gathered.
        merged = json.loads((path.parent / ".deployctl/e2e-upw/ranktables/global_ranktable_merge.json").read_text())
        groups = [[s["server_id"] for s in g["server_list"]] for g in merged["server_group_list"][1:]]
        assert groups == [["10.200.0.11"], ["10.200.0.12"]]
        code, status = deployctl.json("status", path)
        assert status["weights"]["identical"] is True

        before = {**container_ids(bed, "tb1", "e2e-upw"), **container_ids(bed, "tb2", "e2e-upw")}
        manifests = {h: bed.run_on(h, ["stat", "-c", "%Y.%y", f"{DEST}/.deployctl-manifest.json"]).stdout
                     for h in HOSTS}
        code, out, err = deployctl("up", path, "--output", "json")  # no --yes: nothing needs confirming
        assert code == 0, err
        again = json.loads(out)
        assert again["changed"] is False and all(i["healthy"] for i in again["instances"])
        assert "stage image: up to date everywhere" in err
        assert "stage weights: 2 host(s) hold 3 files, nothing to transfer" in err
        assert {**container_ids(bed, "tb1", "e2e-upw"), **container_ids(bed, "tb2", "e2e-upw")} == before
        assert {h: bed.run_on(h, ["stat", "-c", "%Y.%y", f"{DEST}/.deployctl-manifest.json"]).stdout
                for h in HOSTS} == manifests
        assert "smoke" not in again  # no step ran, so no smoke request either
    finally:
        deployctl("down", path, "--yes")
