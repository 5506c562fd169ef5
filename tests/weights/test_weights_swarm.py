"""The fetcher's swarm (deployctl/weights/weights_fetch.py): hosts that fetch the same files read each part from
the source once and pass it on, verified by its sha256; run as the hosts run it, on loopback ports."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib

import pytest

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
        assert status == 200 and body.split()[0] in (b"0", b"1")
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


# Every size a part boundary can get wrong: nothing, one byte, around one part, many parts (issue 39: a zero-byte
# object hung every host of a shared fetch for ever, its part "never arrived" at the hosts that do not own it).
SIZES = {"nested/empty.txt": 0, "one.bin": 1, "under.bin": PART - 1, "exact.bin": PART, "over.bin": PART + 1,
         "many.bin": 5 * PART + 3}
# A hang guard, far above what any of these fetches takes: a fetcher still running then is a hang, not slowness.
GUARD_S = 60


def _ended(procs: list) -> list:
    """Each fetcher's (exit code, result); kills them all when one is still running past the guard."""
    try:
        return [_outcome_within(proc, GUARD_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _outcome_within(proc: subprocess.Popen, seconds: float) -> tuple[int, dict]:
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a fetcher was still running after {seconds} s (a wait with no end)") from None
    assert out.strip(), err
    return proc.returncode, json.loads(out.splitlines()[-1])


def _sized_blobs() -> dict:
    return {name: os.urandom(size) for name, size in SIZES.items()}


@pytest.mark.parametrize("hosts", [1, 3])
def test_objects_of_every_size_end_identical_with_and_without_peers(tmp_path, hosts):
    blobs = _sized_blobs()
    server, state = _serve({"/b/m/" + name: data for name, data in blobs.items()})
    names = [f"h{i}" for i in range(1, hosts + 1)]
    peers = {name: ["127.0.0.1", _free_port()] for name in names}
    try:
        jobs = [_job(tmp_path, name, _files(server, blobs), peers) for name in names]
        if hosts == 1:  # one host alone: no swarm, everything from the source (as the planner sends it)
            jobs = [{k: v for k, v in jobs[0].items() if k != "swarm"}]
        outcomes = _ended([_start(job) for job in jobs])
        for code, outcome in outcomes:
            assert code == 0 and not outcome["errors"], outcome["errors"]
        for name in names:
            for path, data in blobs.items():
                assert (tmp_path / name / path).read_bytes() == data, (name, path)
            assert not list((tmp_path / name).rglob("*.deployctl-partial*"))
        expected = {path: hashlib.sha256(data).hexdigest() for path, data in blobs.items()}
        assert all({p: e["sha256"] for p, e in o["manifest"].items()} == expected for _, o in outcomes)
        if hosts > 1:  # each non-empty part left the source once, for the hosts together
            starts = [(path, start) for path, start, _ in state["ranges"]]
            assert sorted(starts) == sorted(set(starts))
            assert sum(o["source_bytes"] for _, o in outcomes) == sum(len(d) for d in blobs.values())
    finally:
        server.shutdown()


def test_a_zero_byte_object_left_partial_by_a_hung_run_completes_on_the_next(tmp_path):
    """The re-run of the hung sync found `empty.txt.deployctl-partial` on the hosts and hung the same way."""
    blobs = {"nested/empty.txt": b"", "w.bin": os.urandom(2 * PART)}
    server, _ = _serve({"/b/m/" + name: data for name, data in blobs.items()})
    peers = {name: ["127.0.0.1", _free_port()] for name in ("h1", "h2")}
    for name in peers:
        (tmp_path / name / "nested").mkdir(parents=True)
        (tmp_path / name / "nested" / "empty.txt.deployctl-partial").write_bytes(b"")
    try:
        outcomes = _ended([_start(_job(tmp_path, name, _files(server, blobs), peers)) for name in peers])
        assert all(code == 0 and not o["errors"] for code, o in outcomes), outcomes
        for name in peers:
            assert (tmp_path / name / "nested" / "empty.txt").read_bytes() == b""
            assert not (tmp_path / name / "nested" / "empty.txt.deployctl-partial").exists()
    finally:
        server.shutdown()


def test_a_peer_that_never_starts_is_read_around_within_its_bound(tmp_path):
    """h2 is in the swarm but never runs: h1 reads h2's parts from the source once `peer_wait` has passed since
    its own start, says so naming h2, and stops waiting for h2 to be done."""
    data = os.urandom(6 * PART)
    server, state = _serve({"/b/m/w.bin": data})
    peers = {"h1": ["127.0.0.1", _free_port()], "h2": ["127.0.0.1", _free_port()]}  # nothing listens on h2's
    try:
        proc = _start(_job(tmp_path, "h1", _files(server, {"w.bin": data}), peers, peer_wait=1))
        code, outcome = _outcome_within(proc, GUARD_S // 2)
        assert code == 0 and not outcome["errors"], outcome["errors"]
        assert (tmp_path / "h1/w.bin").read_bytes() == data
        assert outcome["fallback_parts"] == 3 and outcome["source_bytes"] == len(data)
        assert sorted(start // PART for _, start, _ in state["ranges"]) == list(range(6))
    finally:
        if proc.poll() is None:
            proc.kill()
        server.shutdown()


def test_a_peer_that_hangs_mid_part_is_read_around_within_its_bound(tmp_path):
    """h2 owns parts and is frozen (SIGSTOP) while it reads one from the source: h1 gets no answer from it at
    all; it reads those parts from the source within about twice `peer_wait` and ends without h2."""
    data = os.urandom(6 * PART)
    blobs = {"w.bin": data}
    # h2 owns the odd parts (Swarm.owner: holders shifted by the path's crc32); hold its first one at the source.
    shift = zlib.crc32(b"w.bin")
    owned = [i for i in range(6) if sorted(["h1", "h2"])[(i + shift) % 2] == "h2"]
    server, state = _serve({"/b/m/w.bin": data}, pause_at={"/b/m/w.bin": owned[0] * PART + 4096})
    peers = {name: ["127.0.0.1", _free_port()] for name in ("h1", "h2")}
    h2 = _start(_job(tmp_path, "h2", _files(server, blobs), peers, peer_wait=1))
    h1 = None
    try:
        assert state["paused"].acquire(timeout=GUARD_S)  # h2 is inside its part: it has started and serves
        os.kill(h2.pid, signal.SIGSTOP)
        state["release"].set()
        h1 = _start(_job(tmp_path, "h1", _files(server, blobs), peers, peer_wait=1))
        code, outcome = _outcome_within(h1, GUARD_S // 2)
        assert code == 0 and not outcome["errors"], outcome["errors"]
        assert (tmp_path / "h1/w.bin").read_bytes() == data
        assert outcome["fallback_parts"] == len(owned) and outcome["peer_bytes"] == 0
    finally:
        for proc in (h1, h2):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
        server.shutdown()
