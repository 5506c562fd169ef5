"""`deployctl weights sync` on the test bed against its real SeaweedFS (issue #10)."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import os
import threading

import pytest

from tests.e2e.conftest import Deployctl

PREFIX = "e2e-weights/"
DEST = "/srv/weights/e2e-w"
HOSTS = ["tb1", "tb2", "tb3"]
MIB = 1 << 20


def model_files() -> dict:
    """Two shards over the multipart threshold (ETag `-N`), config, tokenizer and a nested folder."""
    return {
        "model-00001-of-00002.safetensors": os.urandom(11 * MIB),
        "model-00002-of-00002.safetensors": os.urandom(6 * MIB),
        "config.json": b'{"model_type": "llama"}',
        "tokenizer.json": b'{"version": "1.0"}' * 100,
        "nested/deeper/generation_config.json": b"{}",
        "nested/vocab.txt": os.urandom(3000),
    }


@pytest.fixture(scope="module")
def uploaded(testbed):
    from boto3.s3.transfer import TransferConfig

    client = testbed.s3.client()
    files = model_files()
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    for name, data in files.items():
        path = f"/tmp/e2e-weights-upload-{os.getpid()}"
        with open(path, "wb") as handle:
            handle.write(data)
        client.upload_file(path, testbed.s3.bucket, PREFIX + name, Config=config)
        os.unlink(path)
    etag = client.head_object(Bucket=testbed.s3.bucket, Key=PREFIX + "model-00001-of-00002.safetensors")["ETag"]
    assert etag.strip('"').endswith("-3")
    return files


@pytest.fixture
def s3_env(testbed, monkeypatch):
    for key, value in testbed.s3.env().items():
        monkeypatch.setenv(key, value)
    return testbed.s3


def spec_text(bed, name, hosts, dest=DEST, endpoint=None):
    lines = "\n".join(f"    - {{host: {h}, devices: [6, 7], port: {8400 + i}}}" for i, h in enumerate(hosts))
    weights = (f"weights: {{source: s3://{bed.s3.bucket}/{PREFIX}, endpoint: {endpoint or bed.s3.endpoint}, "
               f"dest: {dest}}}\n")
    extra = ("image: {name: deployctl/standin-vllm:latest}\n" + weights +
             "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n")
    return bed.spec_yaml(name, f"topology:\n  mode: mixed\n  instances:\n{lines}\n", hosts_used=hosts, extra=extra)


def host_sha256(bed, host, dest=DEST) -> dict:
    out = bed.run_on(host, ["sh", "-c", 'cd "$1" && find . -type f ! -name ".deployctl-*" -exec sha256sum {} +',
                            "sh", dest]).stdout
    return {line.split()[1][2:]: line.split()[0] for line in out.splitlines()}


def wipe(bed, hosts, dest=DEST):
    for host in hosts:
        bed.run_on(host, ["rm", "-rf", dest], check=False)


def test_sync_three_hosts_rerun_change_and_no_secret(testbed, uploaded, s3_env, capsys, tmp_path):
    deployctl = Deployctl(capsys, tmp_path)
    path = deployctl.write(spec_text(testbed, "e2e-weights", HOSTS))
    wipe(testbed, HOSTS)
    try:
        code, out, err = deployctl("weights", "sync", path, "--output", "json")
        assert code == 0, err
        import json

        doc = json.loads(out)
        total = sum(len(d) for d in uploaded.values())
        assert doc["deployment"] == "e2e-weights" and doc["identical"] is True
        assert [(h["host"], h["files"], h["bytes"], h["transferred_bytes"]) for h in doc["hosts"]] == [
            (h, 6, total, total) for h in HOSTS]
        expected = {name: hashlib.sha256(data).hexdigest() for name, data in uploaded.items()}
        for host in HOSTS:
            assert host_sha256(testbed, host) == expected
        digest = doc["hosts"][0]["manifest_digest"]

        code, doc = deployctl.json("weights", "sync", path)
        assert code == 0 and [h["transferred_bytes"] for h in doc["hosts"]] == [0, 0, 0]
        assert {h["manifest_digest"] for h in doc["hosts"]} == {digest}

        fetcher_stamp = testbed.run_on("tb2", ["stat", "-c", "%y", "/var/lib/deployctl/e2e-weights/weights_fetch.py"]).stdout
        changed = b'{"model_type": "llama", "changed": true}'
        testbed.s3.client().put_object(Bucket=testbed.s3.bucket, Key=PREFIX + "config.json", Body=changed)
        code, out, err = deployctl("weights", "sync", path, "--output", "json")
        doc = json.loads(out)
        assert code == 0 and [h["transferred_bytes"] for h in doc["hosts"]] == [len(changed)] * 3
        # The fetcher program already on the host is the same: it was not sent again.
        assert testbed.run_on("tb2", ["stat", "-c", "%y", "/var/lib/deployctl/e2e-weights/weights_fetch.py"]).stdout == fetcher_stamp
        assert doc["identical"] is True and doc["hosts"][0]["manifest_digest"] != digest
        assert host_sha256(testbed, "tb2")["config.json"] == hashlib.sha256(changed).hexdigest()

        secret = testbed.s3.secret_key
        for text in (out, err):
            assert secret not in text and "X-Amz-Signature" not in text
        for host in HOSTS:
            found = testbed.run_on(host, ["grep", "-rl", "-e", secret, "-e", "X-Amz-Signature", DEST,
                                          "/var/lib/deployctl"], check=False).stdout
            assert found == ""

        from deployctl.deploy import connected
        from deployctl.spec.load import load_spec
        from deployctl.weights import manifest_digests

        spec = load_spec(path)
        with connected(spec) as transports:
            assert manifest_digests(spec, transports) == {h: doc["hosts"][0]["manifest_digest"] for h in HOSTS}
        code, out, err = deployctl("status", path, "--output", "json")
        assert json.loads(out)["weights"] == {"identical": True,
                                              "hosts": {h: doc["hosts"][0]["manifest_digest"] for h in HOSTS}}
        code, out, err = deployctl("doctor", path, "--output", "json")
        checks = {h["host"]: {c["name"]: c["status"] for c in h["checks"]} for h in json.loads(out)["hosts"]}
        assert {h: c["weights"] for h, c in checks.items()} == {h: "PASS" for h in HOSTS}
    finally:
        testbed.s3.client().put_object(Bucket=testbed.s3.bucket, Key=PREFIX + "config.json",
                                       Body=uploaded["config.json"])
        wipe(testbed, HOSTS)


class _Recording:
    """A transport wrapper that keeps every Command it runs (to check no argv carries a secret)."""

    def __init__(self, inner, log):
        self.inner, self.log, self.name, self.address = inner, log, inner.name, inner.address

    def run(self, command, **kw):
        self.log.append(command)
        return self.inner.run(command, **kw)

    def run_streaming(self, command, on_line, **kw):
        self.log.append(command)
        return self.inner.run_streaming(command, on_line, **kw)

    def put(self, path, content, **kw):
        self.log.append(("put", path, content))
        return self.inner.put(path, content, **kw)

    def get(self, path):
        return self.inner.get(path)

    def close(self):
        self.inner.close()


def test_resume_after_kill_and_no_secret_in_any_argv(testbed, uploaded, s3_env, capsys, tmp_path, monkeypatch):
    from deployctl.deploy import connected
    from deployctl.errors import HostError
    from deployctl.plan.model import Command, Secret
    from deployctl.spec.load import load_spec
    from deployctl.ui import UI
    from deployctl.weights import sync_weights

    path = Deployctl(capsys, tmp_path).write(spec_text(testbed, "e2e-weights-resume", ["tb4"]))
    spec = load_spec(path)
    wipe(testbed, ["tb4"])
    total = sum(len(d) for d in uploaded.values())
    log: list = []
    try:
        with connected(spec) as transports:
            recorded = {name: _Recording(t, log) for name, t in transports.items()}
            monkeypatch.setenv("DEPLOYCTL_WEIGHTS_TEST_STOP_AFTER_BYTES", str(8 * MIB))
            with pytest.raises(HostError) as caught:
                sync_weights(spec, recorded, UI(quiet=True))
            assert "stopped" in caught.value.message and "tb4" in caught.value.message
            names = testbed.run_on("tb4", ["find", DEST, "-type", "f"]).stdout.split()
            assert f"{DEST}/model-00001-of-00002.safetensors" not in names  # nothing that looks complete
            assert any(n.endswith(".deployctl-partial") for n in names)

            monkeypatch.delenv("DEPLOYCTL_WEIGHTS_TEST_STOP_AFTER_BYTES")
            reports = sync_weights(spec, recorded, UI(quiet=True))
            assert 0 < reports[0].transferred_bytes < total
            assert reports[0].files == 6
        expected = {name: hashlib.sha256(data).hexdigest() for name, data in uploaded.items()}
        assert host_sha256(testbed, "tb4") == expected
        secret = testbed.s3.secret_key
        commands = [c for c in log if isinstance(c, Command)]
        assert any(isinstance(c.stdin, Secret) for c in commands)  # the job (URLs) went as stdin only
        for command in commands:
            words = " ".join(command.argv)
            assert secret not in words and "X-Amz-Signature" not in words and "X-Amz-Credential" not in words
            assert command.stdin is None or isinstance(command.stdin, Secret)
        for entry in log:
            if isinstance(entry, tuple):
                assert not isinstance(entry[2], Secret) and b"X-Amz-Signature" not in entry[2]
    finally:
        wipe(testbed, ["tb4"])


class _Flaky(http.server.BaseHTTPRequestHandler):
    """503 for the first `budget` requests, then a plain forward to SeaweedFS (Host header kept: signatures)."""

    protocol_version = "HTTP/1.1"
    budget = 0
    served_503 = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _forward(self):
        with _Flaky.lock:
            fail = _Flaky.budget > 0
            if fail:
                _Flaky.budget -= 1
                _Flaky.served_503 += 1
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if fail:
            payload = b"<Error><Code>SlowDown</Code></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection("10.200.0.1", 8333, timeout=30)
        headers = {k: v for k, v in self.headers.items()}
        upstream.request(self.command, self.path, body=body, headers=headers)
        resp = upstream.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    do_GET = do_HEAD = do_PUT = do_POST = _forward


def test_503s_are_survived_through_a_flaky_endpoint(testbed, uploaded, s3_env, capsys, tmp_path):
    server = http.server.ThreadingHTTPServer(("10.200.0.1", 0), _Flaky)  # 18333 is weed's gRPC port
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    deployctl = Deployctl(capsys, tmp_path)
    path = deployctl.write(spec_text(testbed, "e2e-weights-503", ["tb2"], endpoint=f"http://10.200.0.1:{server.server_port}"))
    wipe(testbed, ["tb2"])
    try:
        _Flaky.budget, _Flaky.served_503 = 8, 0
        code, doc = deployctl.json("weights", "sync", path)
        assert code == 0 and doc["hosts"][0]["files"] == 6
        assert _Flaky.served_503 == 8
        expected = {name: hashlib.sha256(data).hexdigest() for name, data in uploaded.items()}
        assert host_sha256(testbed, "tb2") == expected
    finally:
        server.shutdown()
        server.server_close()
        wipe(testbed, ["tb2"])


def test_full_disk_refused_up_front_and_wrong_credentials(testbed, uploaded, s3_env, capsys, tmp_path, monkeypatch):
    deployctl = Deployctl(capsys, tmp_path)
    testbed.run_on("tb3", ["sh", "-c", "mkdir -p /srv/small && mount -t tmpfs -o size=1m tmpfs /srv/small"])
    try:
        path = deployctl.write(spec_text(testbed, "e2e-weights-full", ["tb3"], dest="/srv/small/model"))
        code, out, err = deployctl("weights", "sync", path)
        assert code == 1
        assert "tb3" in err and "/srv/small" in err and "bytes still to download" in err
        assert testbed.run_on("tb3", ["ls", "-A", "/srv/small"]).stdout == ""  # nothing was written

        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong" + "0" * 35)
        code, out, err = deployctl("weights", "sync", path)
        assert code == 1 and "refused the credentials" in err
        assert "wrong" + "0" * 35 not in err + out
    finally:
        testbed.run_on("tb3", ["sh", "-c", "umount /srv/small; rmdir /srv/small"], check=False)
