"""Commands that need only what they use (issue 18 item 6): `logs`, `status`, `down` run with an `env:` variable
unset; a no-op `up` without S3 credentials judges from the hosts' manifests of the same source."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import container_ids
from tests.testbed.demo import tiny_model

MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb2, devices: [4, 5], port: 8597}\n"
MODEL_ARGS = "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
IMAGE = "image: {name: deployctl/standin-vllm:latest}\n"
VAR = "E2E_UNUSED_TOKEN"


def spec(bed, name: str, weights: str, extra: str = "") -> str:
    return bed.spec_yaml(name, MIXED, hosts_used=["tb2"], extra=IMAGE + weights + MODEL_ARGS + extra)


def test_logs_status_down_need_no_env_value_but_up_and_addresses_do(bed, deployctl, monkeypatch):
    weights = "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
    path = deployctl.write(spec(bed, "e2e-unset", weights, f"env: {{HF_TOKEN: '${{{VAR}}}'}}\n"))
    monkeypatch.setenv(VAR, "hf_e2e_unused_0123456789")
    try:
        assert deployctl("up", path, "--skip", "weights")[0] == 0
        monkeypatch.delenv(VAR)  # a fresh shell
        code, doc = deployctl.json("status", path)
        assert code == 0 and [(i["name"], i["state"]) for i in doc["instances"]] == [("e2e-unset-mixed-0", "running")]
        code, out, err = deployctl("logs", path, "--tail", "1")
        assert code == 0 and out.startswith("e2e-unset-mixed-0 | "), err
        # up sends env to the container: it still refuses, naming the variable
        code, out, err = deployctl("up", path, "--skip", "weights")
        assert code == 2 and f"env.HF_TOKEN: environment variable {VAR} is not set" in err
        # an address is needed to connect: unset, status refuses too
        monkeypatch.setenv(VAR, "x")
        addressed = path.read_text().replace("address: 10.200.0.12", "address: '${E2E_UNSET_ADDRESS}'")
        other = deployctl.write(addressed, "addressed.yaml")
        code, out, err = deployctl("status", other)
        assert code == 2 and "hosts.tb2.address: environment variable E2E_UNSET_ADDRESS is not set" in err
        monkeypatch.delenv(VAR)
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, "tb2", "e2e-unset") == {}
    finally:
        monkeypatch.setenv(VAR, "x")
        deployctl("down", path, "--yes")


@pytest.fixture
def tiny_in_s3(bed):
    prefix = "e2e-nocreds/"
    client = bed.s3.client()
    for name, data in tiny_model().items():
        client.put_object(Bucket=bed.s3.bucket, Key=prefix + name, Body=data)
    yield f"s3://{bed.s3.bucket}/{prefix}"


def test_noop_up_without_credentials_judges_from_the_hosts_manifests(bed, deployctl, monkeypatch, tiny_in_s3):
    dest = "/srv/weights/e2e-nocreds"
    weights = f"weights: {{source: {tiny_in_s3}, dest: {dest}, endpoint: '{bed.s3.endpoint}'}}\n"
    path = deployctl.write(spec(bed, "e2e-nocreds", weights))
    for key, value in bed.s3.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # boto3's chain must not look beyond this machine
    try:
        assert deployctl("up", path)[0] == 0  # with credentials: synced
        manifest = json.loads(bed.run_on("tb2", ["cat", f"{dest}/.deployctl-manifest.json"]).stdout)
        assert manifest["source"] == tiny_in_s3 and manifest["listed"].endswith("Z")
        for key in bed.s3.env():
            monkeypatch.delenv(key)  # a fresh shell: no credentials
        code, out, err = deployctl("up", path)
        assert code == 0, err
        assert (f"weights: every host holds the manifest of {tiny_in_s3} (listed {manifest['listed']}); "
                "source not listed: no credentials") in err
        # a host that lost a file: no judging from the manifest, the error says how to go on
        bed.run_on("tb2", ["rm", f"{dest}/config.json"])
        code, out, err = deployctl("up", path)
        assert code == 1
        assert f"error: weights: no credentials to read {tiny_in_s3}" in err
        assert f"skip this stage: deployctl up {path} --skip weights" in " ".join(err.split())
    finally:
        deployctl("down", path, "--yes")
        bed.run_on("tb2", ["rm", "-rf", dest])
