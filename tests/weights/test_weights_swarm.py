"""The fetcher's swarm (deployctl/weights/weights_fetch.py): hosts that fetch the same files read each part from
the source once and pass it on, verified by its sha256; run as the hosts run it, on loopback ports."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

from tests.weights.test_weights_fetch import FETCHER, _entry, _serve

PART = 256 << 10
TOKEN = "t0ken-for-this-stage"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _job(tmp_path, name: str, files: list, peers: dict, **swarm) -> dict:
    holders = sorted(peers)
    return {"dest": str(tmp_path / name), "source": "s3://b/m/", "part_size": PART, "concurrency": 2,
            "direct_min": 0, "files": [{**f, "holders": holders} for f in files],
            "swarm": {"token": TOKEN, "me": name, "peers": peers, "peer_concurrency": 2, **swarm}}


def _start(job: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(FETCHER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it
    return proc


def _outcome(proc: subprocess.Popen) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=120)
    assert out.strip(), err
    return proc.returncode, json.loads(out.splitlines()[-1])


def _files(server, blobs: dict) -> list:
    return [_entry(server, "m/" + name, name, data) for name, data in blobs.items()]


def test_three_hosts_read_each_part_from_the_source_once_and_end_byte_identical(tmp_path):
    blobs = {"big.bin": os.urandom(9 * PART + 1234), "second.bin": os.urandom(4 * PART), "config.json": b'{"a": 1}'}
    server, state = _serve({"/b/m/" + name: data for name, data in blobs.items()})
    peers = {name: ["127.0.0.1", _free_port()] for name in ("h1", "h2", "h3")}
    try:
        procs = [_start(_job(tmp_path, name, _files(server, blobs), peers)) for name in peers]
        outcomes = [_outcome(proc) for proc in procs]
        for code, outcome in outcomes:
            assert code == 0 and not outcome["errors"], outcome["errors"]
        for name in peers:
            for path, data in blobs.items():
                assert (tmp_path / name / path).read_bytes() == data
        manifests = [outcome["manifest"] for _, outcome in outcomes]
        assert manifests[0] == manifests[1] == manifests[2]
        assert manifests[0]["big.bin"]["sha256"] == hashlib.sha256(blobs["big.bin"]).hexdigest()
        # Every part went out of the source exactly once, for the three hosts together.
        starts = [(path, start) for path, start, _ in state["ranges"]]
        assert sorted(starts) == sorted(set(starts)) and len(starts) == 10 + 4 + 1
        assert sum(o["source_bytes"] for _, o in outcomes) == sum(len(d) for d in blobs.values())
        assert all(o["peer_bytes"] > 0 for _, o in outcomes)
        assert all(o["transferred_bytes"] == o["peer_bytes"] + o["source_bytes"] for _, o in outcomes)
    finally:
        server.shutdown()


class _FakePeer:
    """A peer that owns parts and sends wrong bytes (and the right hash), and says it is done on demand."""

    def __init__(self, blobs: dict) -> None:
        self.done = threading.Event()
        self.asked = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                from urllib.parse import parse_qs, urlsplit

                url = urlsplit(self.path)
                if url.path == "/done":
                    body = b"1" if fake.done.is_set() else b"0"
                    self.send_response(200)
                    self.send_header("Content-Length", "1")
                    self.end_headers()
                    self.wfile.write(body)
                    return
                query = parse_qs(url.query)
                data, index = blobs[query["path"][0]], int(query["index"][0])
                part = data[index * PART:(index + 1) * PART]
                if url.path == "/sha":  # the right hash ...
                    body = hashlib.sha256(part).hexdigest().encode()
                else:  # ... of other bytes
                    fake.asked.append((query["path"][0], index))
                    body = bytes([part[0] ^ 0xFF]) + part[1:]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _get(port: int, path: str, token: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer " + token})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_corrupted_part_from_a_peer_is_rejected_and_read_from_the_source_and_a_wrong_token_is_refused(tmp_path):
    data = os.urandom(6 * PART)
    blobs = {"w.bin": data}
    server, state = _serve({"/b/m/w.bin": data})
    fake = _FakePeer(blobs)
    port = _free_port()
    peers = {"h1": ["127.0.0.1", port], "h2": ["127.0.0.1", fake.server.server_port]}
    try:
        proc = _start(_job(tmp_path, "h1", _files(server, blobs), peers))
        # h1 serves its own parts: only with the stage's token.
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(port, "/done", TOKEN)
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.02)
        assert status == 200 and body in (b"0", b"1")
        assert _get(port, "/done", "wrong")[0] == 403
        assert _get(port, "/part?path=w.bin&index=0", "")[0] == 403
        fake.done.set()
        code, outcome = _outcome(proc)
        assert code == 0 and not outcome["errors"], outcome["errors"]
        assert (tmp_path / "h1/w.bin").read_bytes() == data
        assert outcome["manifest"]["w.bin"]["sha256"] == hashlib.sha256(data).hexdigest()
        # Every part h2 owns was asked of h2, rejected, and read from the source instead.
        assert fake.asked and outcome["rejected"] == len(fake.asked) == outcome["fallback_parts"]
        fetched = sorted(start // PART for _, start, _ in state["ranges"])
        assert fetched == list(range(6))
        assert outcome["peer_bytes"] == 0 and outcome["source_bytes"] == len(data)
    finally:
        server.shutdown()
        fake.server.shutdown()
