"""Weights sources beside env-credential S3 (issue 19 item 8): a local directory, `profile:` credentials, and
objects deleted at the source removed at the destination, through the CLI on the test bed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ".deployctl-manifest.json"


def spec_text(bed, name, host, source, dest, credentials=""):
    weights = f"weights: {{source: {source}, dest: {dest}" + (
        f", endpoint: {bed.s3.endpoint}" if source.startswith("s3://") else "") + (
        f", credentials: '{credentials}'" if credentials else "") + "}\n"
    extra = ("image: {name: deployctl/standin-vllm:latest}\n" + weights +
             "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n")
    topology = f"topology:\n  mode: mixed\n  instances:\n    - {{host: {host}, devices: [6, 7], port: 8600}}\n"
    return bed.spec_yaml(name, topology, hosts_used=[host], extra=extra)


def host_files(bed, host, dest) -> dict:
    """path -> sha256 of every file under dest on a host except deployctl's own (manifest, partials)."""
    out = bed.run_on(host, ["sh", "-c", 'cd "$1" && find . -type f ! -name ".deployctl-*" -exec sha256sum {} +',
                            "sh", dest]).stdout
    return {line.split()[1][2:]: line.split()[0] for line in out.splitlines()}


def manifest_files(bed, host, dest) -> dict:
    return json.loads(bed.run_on(host, ["cat", f"{dest}/{MANIFEST}"]).stdout)["files"]


def digests(files: dict) -> dict:
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": os.urandom(200_000),
         "nested/tokenizer.json": b'{"version": "1.0"}' * 50}


@pytest.fixture
def wiped(bed):
    dests = []
    yield dests.append
    for host, dest in dests:
        bed.run_on(host, ["rm", "-rf", dest], check=False)


def test_local_directory_source_syncs_updates_and_removes_only_its_own_stale_files(bed, deployctl, tmp_path, wiped):
    source = tmp_path / "model"
    for name, data in FILES.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    dest = "/srv/weights/e2e-local"
    wiped(("tb3", dest))
    bed.run_on("tb3", ["rm", "-rf", dest], check=False)
    path = deployctl.write(spec_text(bed, "e2e-wlocal", "tb3", str(source), dest))

    code, doc = deployctl.json("weights", "sync", path)
    assert code == 0, doc
    total = sum(map(len, FILES.values()))
    assert [(h["host"], h["files"], h["bytes"], h["transferred_bytes"]) for h in doc["hosts"]] == [
        ("tb3", 3, total, total)]
    assert host_files(bed, "tb3", dest) == digests(FILES)
    assert json.loads(bed.run_on("tb3", ["cat", f"{dest}/{MANIFEST}"]).stdout)["source"] == str(source)

    code, doc = deployctl.json("weights", "sync", path)
    assert code == 0 and doc["hosts"][0]["transferred_bytes"] == 0

    # At the source: one file changed, one deleted. A file the user put into dest is not deployctl's to remove.
    bed.run_on("tb3", ["sh", "-c", f"echo mine > {dest}/notes.txt"])
    (source / "config.json").write_bytes(b'{"model_type": "llama", "v": 2}')
    (source / "nested" / "tokenizer.json").unlink()
    code, doc = deployctl.json("weights", "sync", path)
    assert code == 0, doc
    assert doc["hosts"][0]["files"] == 2 and doc["hosts"][0]["transferred_bytes"] == len(b'{"model_type": "llama", "v": 2}')
    wanted = digests({"config.json": b'{"model_type": "llama", "v": 2}', "model.safetensors": FILES["model.safetensors"]})
    assert host_files(bed, "tb3", dest) == {**wanted, "notes.txt": hashlib.sha256(b"mine\n").hexdigest()}
    assert {p: e["sha256"] for p, e in manifest_files(bed, "tb3", dest).items()} == wanted


@pytest.fixture
def s3_prefix(bed):
    """A fresh prefix holding FILES on the bed's S3; deleted afterwards."""
    client, prefix = bed.s3.client(), f"e2e-src-{os.getpid()}/"
    for name, data in FILES.items():
        client.put_object(Bucket=bed.s3.bucket, Key=prefix + name, Body=data)
    yield prefix
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bed.s3.bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            client.delete_object(Bucket=bed.s3.bucket, Key=item["Key"])


def test_object_deleted_at_the_s3_source_is_removed_at_the_destination(bed, deployctl, monkeypatch, s3_prefix, wiped):
    for key, value in bed.s3.env().items():
        monkeypatch.setenv(key, value)
    dest = "/srv/weights/e2e-removed"
    wiped(("tb4", dest))
    bed.run_on("tb4", ["rm", "-rf", dest], check=False)
    path = deployctl.write(spec_text(bed, "e2e-wremove", "tb4", f"s3://{bed.s3.bucket}/{s3_prefix}", dest))
    code, doc = deployctl.json("weights", "sync", path)
    assert code == 0 and host_files(bed, "tb4", dest) == digests(FILES)

    bed.run_on("tb4", ["sh", "-c", f"echo mine > {dest}/notes.txt"])
    bed.s3.client().delete_object(Bucket=bed.s3.bucket, Key=s3_prefix + "nested/tokenizer.json")
    code, doc = deployctl.json("weights", "sync", path)
    assert code == 0, doc
    assert (doc["hosts"][0]["files"], doc["hosts"][0]["transferred_bytes"]) == (2, 0)
    left = {k: v for k, v in FILES.items() if k != "nested/tokenizer.json"}
    assert host_files(bed, "tb4", dest) == {**digests(left), "notes.txt": hashlib.sha256(b"mine\n").hexdigest()}
    assert sorted(manifest_files(bed, "tb4", dest)) == sorted(left)
    code, status = deployctl.json("status", path)
    assert status["weights"]["hosts"] == {"tb4": doc["hosts"][0]["manifest_digest"]}


def test_profile_credentials_from_a_shared_credentials_file(bed, tmp_path, s3_prefix, wiped):
    """`credentials: profile:e2e`: the keys live only in a credentials file; none is in the environment."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[e2e]\naws_access_key_id = {bed.s3.access_key}\naws_secret_access_key = {bed.s3.secret_key}\n")
    (home / ".aws" / "config").write_text("[profile e2e]\nregion = us-east-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), AWS_SHARED_CREDENTIALS_FILE=str(home / ".aws" / "credentials"),
               AWS_CONFIG_FILE=str(home / ".aws" / "config"), NO_COLOR="1")
    dest = "/srv/weights/e2e-profile"
    wiped(("tb2", dest))
    bed.run_on("tb2", ["rm", "-rf", dest], check=False)

    def sync(credentials):
        spec = tmp_path / f"{credentials.replace(':', '-')}.yaml"
        spec.write_text(spec_text(bed, "e2e-wprofile", "tb2", f"s3://{bed.s3.bucket}/{s3_prefix}", dest, credentials))
        return subprocess.run([sys.executable, "-m", "deployctl", "weights", "sync", str(spec), "-o", "json"],
                              capture_output=True, text=True, env=env, cwd=ROOT)

    missing = sync("profile:nope")
    assert missing.returncode != 0 and "nope" in missing.stderr and "Traceback" not in missing.stderr
    without = sync("env")  # the same environment without the profile has no credentials at all
    assert without.returncode != 0 and "credentials" in without.stderr

    done = sync("profile:e2e")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hosts"][0]["files"] == 3
    assert host_files(bed, "tb2", dest) == digests(FILES)
    assert bed.s3.secret_key not in done.stdout + done.stderr
