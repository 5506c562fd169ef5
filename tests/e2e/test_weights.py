"""`deployctl weights sync` on the test bed against its real SeaweedFS (issue #10)."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.children import default_sigint
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


def spec_text(bed, name, hosts, dest=DEST, endpoint=None, prefix=PREFIX):
    lines = "\n".join(f"    - {{host: {h}, devices: [6, 7], port: {8400 + i}}}" for i, h in enumerate(hosts))
    weights = (f"weights: {{source: s3://{bed.s3.bucket}/{prefix}, endpoint: {endpoint or bed.s3.endpoint}, "
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

        from deployctl.gather import gather_state
        from deployctl.hosts import connected
        from deployctl.spec.load import load_spec
        from deployctl.weights.manifest import manifest_digest

        spec = load_spec(path)
        with connected(spec) as transports:
            facts = gather_state(spec, transports, stages=frozenset({"weights"}))
        assert {h: manifest_digest(f.weights.manifest) for h, f in facts.items()} == {
            h: doc["hosts"][0]["manifest_digest"] for h in HOSTS}
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

    def open_stream(self, command):
        self.log.append(command)
        return self.inner.open_stream(command)

    def put(self, path, content, **kw):
        self.log.append(("put", path, content))
        return self.inner.put(path, content, **kw)

    def get(self, path):
        return self.inner.get(path)

    def close(self):
        self.inner.close()


def test_no_secret_in_any_argv_or_put(testbed, uploaded, s3_env, capsys, tmp_path):
    from deployctl.hosts import connected
    from deployctl.core import Command, Secret
    from deployctl.spec.load import load_spec
    from deployctl.commands.weights import sync_weights

    path = Deployctl(capsys, tmp_path).write(spec_text(testbed, "e2e-weights-argv", ["tb4"]))
    spec = load_spec(path)
    wipe(testbed, ["tb4"])
    log: list = []
    try:
        with connected(spec) as transports:
            rows = sync_weights(spec, {name: _Recording(t, log) for name, t in transports.items()})
        assert rows[0]["files"] == 6
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


def host_processes(bed, host) -> dict:
    """pid -> (parent pid, comm, cmdline) of the processes in one host's network namespace."""
    pids = subprocess.run(["ip", "netns", "pids", bed.host(host).netns], capture_output=True, text=True).stdout.split()
    found = {}
    for pid in pids:
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue  # ended meanwhile
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        found[int(pid)] = (int(rest[1]), comm, cmdline)
    return found


def wait_until(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def wait_gone(pid: int) -> None:
    """Wait for a process to end (its pidfd becomes readable), without polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([fd], [], [], 60)[0], f"process {pid} did not end"
    finally:
        os.close(fd)


SHARD = "model-00001-of-00002.safetensors"


@pytest.mark.parametrize("fault", ["sigkill", "ssh_drop", "ctrl_c"])
def test_sync_interrupted_mid_transfer_resumes_with_fewer_bytes(testbed, uploaded, s3_env, capsys, tmp_path, proxy,
                                                               fault):
    """The proxy holds the 11 MiB shard at 4 MiB; once the host's resume state shows progress, the fetcher is
    SIGKILLed, or its SSH session is killed on the host, or `deployctl weights sync` gets Ctrl-C. The next sync
    fetches less than everything and ends with the right bytes."""
    deployment = f"e2e-weights-{fault.replace('_', '-')}"
    deployctl = Deployctl(capsys, tmp_path)
    path = deployctl.write(spec_text(testbed, deployment, ["tb4"], endpoint=proxy.endpoint))
    wipe(testbed, ["tb4"])
    state_file = testbed.host("tb4").dir / "srv" / DEST.removeprefix("/srv/") / (SHARD + ".deployctl-partial.json")
    fetcher_path = f"/var/lib/deployctl/{deployment}/weights_fetch.py"
    total = sum(len(d) for d in uploaded.values())
    proxy.pause_key, proxy.pause_at = f"/{testbed.s3.bucket}/{PREFIX}{SHARD}", 4 * MIB
    sync = subprocess.Popen([sys.executable, "-m", "deployctl", "weights", "sync", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
                            preexec_fn=default_sigint)  # Ctrl-C reaches it whatever shell started the suite
    try:
        assert proxy.paused.acquire(timeout=60)

        def progressed():
            try:
                return json.loads(state_file.read_text())["written"][0] >= MIB
            except (OSError, ValueError):
                return False

        wait_until(progressed, "the shard's resume state")
        manifest = testbed.host("tb4").dir / "srv" / DEST.removeprefix("/srv/") / ".deployctl-manifest.json"

        def other_shard_recorded():
            try:
                return "model-00002-of-00002.safetensors" in json.loads(manifest.read_text())["files"]
            except (OSError, ValueError):
                return False

        wait_until(other_shard_recorded, "the other shard in the manifest")
        processes = host_processes(testbed, "tb4")
        fetcher = [pid for pid, (_, _, cmd) in processes.items() if fetcher_path in cmd]
        assert len(fetcher) == 1, processes
        if fault == "sigkill":
            os.kill(fetcher[0], signal.SIGKILL)
        elif fault == "ssh_drop":
            # The session's sshd processes above the fetcher (not the listener, whose parent is no sshd).
            session, pid = [], processes[fetcher[0]][0]
            while processes.get(pid, (0, ""))[1] in ("sshd", "sshd-session") \
                    and processes.get(processes[pid][0], (0, ""))[1] in ("sshd", "sshd-session"):
                session.append(pid)
                pid = processes[pid][0]
            assert session, processes
            for pid in session:
                os.kill(pid, signal.SIGKILL)
        else:
            sync.send_signal(signal.SIGINT)
        out, err = sync.communicate(timeout=120)
        wait_gone(fetcher[0])  # nothing is left running on the host
        if fault == "ctrl_c":
            assert sync.returncode == 130 and "interrupted" in err, err
        else:
            assert sync.returncode == 1, err
            assert (f"tb4 (10.200.0.14): weights fetch into {DEST} stopped (exit -1); partial files stay and the "
                    "next sync resumes them") in err and "Traceback" not in err
        names = testbed.run_on("tb4", ["find", DEST, "-type", "f"]).stdout.split()
        assert f"{DEST}/{SHARD}" not in names and f"{DEST}/{SHARD}.deployctl-partial" in names

        proxy.release.set()
        code, doc = deployctl.json("weights", "sync", path)
        assert code == 0 and doc["hosts"][0]["files"] == 6
        # Only the held shard's rest moved (resumed inside it), and at most the small files recorded together
        # (the manifest notes those at most once a second); never the other shard, complete before the fault.
        small = sum(len(d) for d in uploaded.values() if len(d) < MIB)
        moved = doc["hosts"][0]["transferred_bytes"]
        assert len(uploaded[SHARD]) - 4 * MIB <= moved <= len(uploaded[SHARD]) - MIB + small
        expected = {name: hashlib.sha256(data).hexdigest() for name, data in uploaded.items()}
        assert host_sha256(testbed, "tb4") == expected
    finally:
        proxy.release.set()
        if sync.poll() is None:
            sync.kill()
            sync.communicate()
        wipe(testbed, ["tb4"])


class S3Proxy:
    """A forwarding proxy in front of SeaweedFS that the test drives. It logs every request (client address,
    method, key, Range, status), answers 503 to the first `fail_ranged` ranged GETs that come from a host (the
    fetcher; the control side's listing comes from 10.200.0.1 and is never failed), and holds the hosts' GETs of
    `pause_key` at byte `pause_at` until `release` is set: a request starting there waits before it is forwarded,
    one crossing it stops after the bytes before it. `paused` counts held requests. The Host header is kept, so
    pre-signed signatures stay valid."""

    def __init__(self, bed):
        self.upstream = bed.s3.endpoint.split("//", 1)[1]
        self.log: list[dict] = []
        self.fail_ranged = 0
        self.pause_key, self.pause_at = None, None
        self.paused, self.release = threading.Semaphore(0), threading.Event()
        self.changed = threading.Condition()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.forward(self)

            do_HEAD = do_PUT = do_POST = do_GET

        self.server = http.server.ThreadingHTTPServer(("10.200.0.1", 0), Handler)  # 18333 is weed's gRPC port
        self.server.daemon_threads = True
        self.endpoint = f"http://10.200.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def note(self, entry: dict) -> None:
        with self.changed:
            self.log.append(entry)
            self.changed.notify_all()

    def wait_for(self, predicate, timeout=60.0) -> None:
        """Wait until predicate(log) holds (woken by every new log entry)."""
        with self.changed:
            assert self.changed.wait_for(lambda: predicate(self.log), timeout), self.log

    def forward(self, handler) -> None:
        client = handler.client_address[0]
        key = handler.path.split("?")[0]
        ranged = handler.headers.get("Range")
        start = int(ranged.split("=")[1].split("-")[0]) if ranged else 0
        entry = {"client": client, "method": handler.command, "key": key, "range": ranged,
                 "if_match": handler.headers.get("If-Match")}
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        from_host = client != "10.200.0.1"
        with self.changed:
            fail = from_host and ranged is not None and self.fail_ranged > 0
            self.fail_ranged -= fail
        if fail:
            payload = b"<Error><Code>SlowDown</Code></Error>"
            handler.send_response(503)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            self.note({**entry, "status": 503})
            return
        pausing = from_host and key == self.pause_key and not self.release.is_set()
        if pausing and start >= self.pause_at:
            self.paused.release()
            self.release.wait(120)
        upstream = http.client.HTTPConnection(self.upstream, timeout=60)
        upstream.request(handler.command, handler.path, body=body, headers=dict(handler.headers.items()))
        resp = upstream.getresponse()
        handler.send_response(resp.status)
        declared = resp.getheader("Content-Length")
        data = None if declared is not None or handler.command == "HEAD" else resp.read()
        for name, value in resp.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", declared if declared is not None else str(len(data or b"")))
        handler.end_headers()
        sent = 0
        try:
            if data is not None:
                handler.wfile.write(data)
            elif handler.command != "HEAD":
                while True:
                    chunk = resp.read(256 << 10)
                    if not chunk:
                        break
                    if pausing and start + sent <= self.pause_at < start + sent + len(chunk) \
                            and not self.release.is_set():
                        cut = self.pause_at - start - sent
                        handler.wfile.write(chunk[:cut])
                        handler.wfile.flush()
                        self.paused.release()
                        self.release.wait(120)
                        handler.wfile.write(chunk[cut:])
                    else:
                        handler.wfile.write(chunk)
                    sent += len(chunk)
        except OSError:  # the fetcher was killed or its connection dropped
            self.note({**entry, "status": resp.status, "broken": True})
            return
        finally:
            upstream.close()
        self.note({**entry, "status": resp.status})


@pytest.fixture
def proxy(testbed):
    proxy = S3Proxy(testbed)
    yield proxy
    proxy.close()


def test_503s_reach_the_host_fetcher_which_retries_them(testbed, uploaded, s3_env, capsys, tmp_path, proxy):
    deployctl = Deployctl(capsys, tmp_path)
    path = deployctl.write(spec_text(testbed, "e2e-weights-503", ["tb2"], endpoint=proxy.endpoint))
    wipe(testbed, ["tb2"])
    try:
        proxy.fail_ranged = 8
        code, doc = deployctl.json("weights", "sync", path)
        assert code == 0 and doc["hosts"][0]["files"] == 6
        total = sum(len(d) for d in uploaded.values())
        assert doc["hosts"][0]["transferred_bytes"] == total
        expected = {name: hashlib.sha256(data).hexdigest() for name, data in uploaded.items()}
        assert host_sha256(testbed, "tb2") == expected
        # The control side's listing went through untouched; the host's ranged GETs took all eight 503s ...
        control = [e for e in proxy.log if e["client"] == "10.200.0.1"]
        assert control and {e["status"] for e in control} == {200}
        host = [e for e in proxy.log if e["client"] == "10.200.0.12"]
        failed = [(e["key"], e["range"]) for e in host if e["status"] == 503]
        assert len(failed) == 8 and all(r is not None for _, r in failed)
        # ... and retried each failed part until it was served.
        served = [(e["key"], e["range"]) for e in host if e["status"] == 206]
        assert set(failed) <= set(served)
        assert sorted(served) == sorted(set(served)) and len(served) == 6  # each part served once, one per file
    finally:
        wipe(testbed, ["tb2"])


def test_an_object_replaced_on_the_store_mid_sync_stops_it_and_leaves_no_mixed_file(testbed, s3_env, capsys,
                                                                                     tmp_path, proxy):
    """Two parts: the proxy lets the first through and holds the second before it reaches SeaweedFS; the object is
    replaced meanwhile, so the second GET's If-Match (the listed ETag, quoted) gets 412."""
    from deployctl.execute.weights import PART_SIZE

    prefix, key = "e2e-weights-ifmatch/", "e2e-weights-ifmatch/big.bin"
    old, new = os.urandom(PART_SIZE + 4 * MIB), os.urandom(PART_SIZE + 4 * MIB)
    client = testbed.s3.client()
    client.put_object(Bucket=testbed.s3.bucket, Key=key, Body=old)
    old_etag = client.head_object(Bucket=testbed.s3.bucket, Key=key)["ETag"]
    dest = "/srv/weights/e2e-ifmatch"
    path = Deployctl(capsys, tmp_path).write(spec_text(testbed, "e2e-weights-ifmatch", ["tb3"], dest=dest,
                                                       endpoint=proxy.endpoint, prefix=prefix))
    wipe(testbed, ["tb3"], dest)
    proxy.pause_key, proxy.pause_at = f"/{testbed.s3.bucket}/{key}", PART_SIZE
    sync = subprocess.Popen([sys.executable, "-m", "deployctl", "weights", "sync", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    try:
        assert proxy.paused.acquire(timeout=60)  # the second part is held
        proxy.wait_for(lambda log: any(e["key"] == proxy.pause_key and e["range"] == f"bytes=0-{PART_SIZE - 1}"
                                       and e["status"] == 206 and not e.get("broken") for e in log))
        client.put_object(Bucket=testbed.s3.bucket, Key=key, Body=new)
        proxy.release.set()
        out, err = sync.communicate(timeout=120)
        assert sync.returncode == 1
        assert (f"tb3 (10.200.0.13): weights fetch into {dest} failed: {key}: the object changed during the sync "
                f"(its ETag is no longer {old_etag.strip(chr(34))}); run it again") in err
        second = [e for e in proxy.log if e["key"] == proxy.pause_key and e["range"].startswith(f"bytes={PART_SIZE}-")]
        assert [(e["status"], e["if_match"]) for e in second] == [(412, old_etag)]  # quoted, as S3 returns it
        files = testbed.run_on("tb3", ["find", dest, "-type", "f"]).stdout.split()
        assert f"{dest}/big.bin" not in files  # nothing mixed in place
        manifest = testbed.run_on("tb3", ["cat", f"{dest}/.deployctl-manifest.json"]).stdout
        assert "big.bin" not in json.loads(manifest)["files"]

        code, doc = Deployctl(capsys, tmp_path).json("weights", "sync", path)
        assert code == 0 and doc["hosts"][0]["files"] == 1
        assert host_sha256(testbed, "tb3", dest) == {"big.bin": hashlib.sha256(new).hexdigest()}
    finally:
        proxy.release.set()
        if sync.poll() is None:
            sync.kill()
            sync.communicate()
        client.delete_object(Bucket=testbed.s3.bucket, Key=key)
        wipe(testbed, ["tb3"], dest)


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
