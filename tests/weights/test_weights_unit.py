"""Pure parts of weights sync: source parsing, per-host plan, digest, job, progress lines; the host fetcher locally."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from deployctl.errors import UsageError
from deployctl.weights.manifest import HostState, SourceObject, manifest_digest, plan_host
from deployctl.weights.progress import parse_progress
from deployctl.weights.source import Source, addressing_style, parse_source, region_of, relative_path
from deployctl.weights.sync import build_job

FETCHER = Path(__file__).resolve().parents[2] / "deployctl" / "weights" / "weights_fetch.py"


def test_parse_source_forms():
    assert parse_source("s3://models/llama/") == Source("s3", "s3://models/llama/", bucket="models", prefix="llama/")
    assert parse_source("obs://b/m") == Source("s3", "obs://b/m", bucket="b", prefix="m/")
    assert parse_source("s3://b") == Source("s3", "s3://b", bucket="b", prefix="")
    assert parse_source("/data/m") == Source("local", "/data/m", path="/data/m")
    with pytest.raises(UsageError):
        parse_source("http://x/y")


def test_addressing_and_region():
    assert addressing_style("http://10.200.0.1:8333") == "path"
    assert addressing_style("https://obs.cn-southwest-2.myhuaweicloud.com") == "virtual"
    assert region_of("https://obs.cn-southwest-2.myhuaweicloud.com", None) == "cn-southwest-2"
    assert region_of("http://10.200.0.1:8333", None) == "us-east-1"
    assert region_of("http://x", "eu-west-1") == "eu-west-1"


def test_relative_path_skips_markers_and_unsafe_names():
    assert relative_path("m/a/b.json", "m/") == "a/b.json"
    assert relative_path("m/dir/", "m/") is None
    assert relative_path("m/../etc/passwd", "m/") is None
    assert relative_path("other/x", "m/") is None


OBJ_A = SourceObject("m/a", "a", 10, "e1")
OBJ_B = SourceObject("m/d/b", "d/b", 20, "e2-2")


def test_plan_skips_what_the_manifest_vouches_for_and_counts_partials():
    manifest = {"a": {"size": 10, "etag": "e1", "sha256": "x"}, "gone": {"size": 1, "etag": "z", "sha256": "y"}}
    state = HostState(manifest, {"a": 10, "d/b.deployctl-partial": 8}, free_bytes=100, free_path="/srv")
    plan = plan_host((OBJ_A, OBJ_B), state)
    assert plan.fetch == (OBJ_B,) and plan.remove == ("gone",) and plan.bytes_needed == 12


def test_plan_refetches_a_changed_etag_or_a_missing_file():
    manifest = {"a": {"size": 10, "etag": "old", "sha256": "x"}, "d/b": {"size": 20, "etag": "e2-2", "sha256": "y"}}
    plan = plan_host((OBJ_A, OBJ_B), HostState(manifest, {"a": 10}, 0, "/"))
    assert plan.fetch == (OBJ_A, OBJ_B) and plan.bytes_needed == 30


def test_digest_is_order_free_and_none_when_empty():
    one = {"a": {"size": 1, "sha256": "aa", "etag": "1"}, "b": {"size": 2, "sha256": "bb", "etag": "2"}}
    two = dict(reversed(list(one.items())))
    assert manifest_digest(one) == manifest_digest(two)
    assert manifest_digest(one).startswith("sha256:")
    assert manifest_digest({**one, "b": {"size": 2, "sha256": "cc"}}) != manifest_digest(one)
    assert manifest_digest({}) is None


def test_job_carries_urls_only_for_fetched_files():
    state = HostState({}, {}, 10**9, "/")
    plan = plan_host((OBJ_A,), state)
    job = build_job("/w", "s3://b/m/", plan, {"m/a": "http://s/m/a?sig"}, stop_after=5)
    assert job["files"] == [{"key": "m/a", "path": "a", "size": 10, "etag": "e1", "url": "http://s/m/a?sig"}]
    assert job["stop_after_bytes"] == 5 and job["dest"] == "/w"


def test_progress_line():
    assert parse_progress("P 5 10") == (5, 10)
    assert parse_progress("Traceback") is None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def _serve(blobs: dict, fail_first: int):
    state = {"fails": fail_first, "requests": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            state["requests"] += 1
            if state["fails"] > 0:
                state["fails"] -= 1
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = blobs[self.path.split("?")[0]]
            start, end = 0, len(data) - 1
            if "Range" in self.headers:
                first, last = self.headers["Range"].split("=")[1].split("-")
                start, end = int(first), int(last)
            self.send_response(206 if "Range" in self.headers else 200)
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            self.wfile.write(data[start:end + 1])

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state


def _run_fetcher(job: dict):
    proc = subprocess.run([sys.executable, str(FETCHER)], input=json.dumps(job), capture_output=True, text=True)
    return proc, (json.loads(proc.stdout.splitlines()[-1]) if proc.stdout.strip() else None)


def test_fetcher_parts_retries_resume_and_manifest(tmp_path):
    import hashlib

    big = bytes(range(256)) * 4000  # 1 024 000 bytes, 8 parts of 128 KiB
    small = b'{"a": 1}'
    server, state = _serve({"/b/big": big, "/b/small": small}, fail_first=3)
    base = f"http://127.0.0.1:{server.server_port}"
    files = [{"key": "m/big", "path": "w/big.bin", "size": len(big), "etag": "x-2", "url": base + "/b/big?X-Sig=s"},
             {"key": "m/small", "path": "c.json", "size": len(small), "etag": hashlib.md5(small).hexdigest(),
              "url": base + "/b/small?X-Sig=s"}]
    job = {"dest": str(tmp_path / "dest"), "source": "s3://b/m/", "part_size": 131072, "concurrency": 1,
           "files": files, "remove": [], "stop_after_bytes": 300000}
    proc, _ = _run_fetcher(job)
    assert proc.returncode == 75
    assert not (tmp_path / "dest/w/big.bin").exists() and (tmp_path / "dest/w/big.bin.deployctl-partial").exists()

    del job["stop_after_bytes"]
    proc, outcome = _run_fetcher(job)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "dest/w/big.bin").read_bytes() == big
    assert (tmp_path / "dest/c.json").read_bytes() == small
    # The first run finished 2 parts (262144 bytes) before stopping: only the rest moved now.
    assert outcome["transferred_bytes"] == len(big) + len(small) - 262144
    assert outcome["manifest"]["w/big.bin"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert sorted(p.name for p in (tmp_path / "dest").rglob("*")) == [".deployctl-manifest.json", "big.bin",
                                                                        "c.json", "w"]
    server.shutdown()


def test_fetcher_rejects_content_that_does_not_match_its_md5_etag(tmp_path):
    server, _ = _serve({"/b/x": b"hello"}, fail_first=0)
    files = [{"key": "m/x", "path": "x", "size": 5, "etag": "0" * 32,
              "url": f"http://127.0.0.1:{server.server_port}/b/x?X-Sig=s"}]
    proc, outcome = _run_fetcher({"dest": str(tmp_path), "files": files, "part_size": 1 << 20})
    assert proc.returncode == 1 and "does not match its ETag" in outcome["errors"][0]
    assert "X-Sig" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".deployctl-manifest.json"]
    server.shutdown()



def test_a_one_part_file_resumes_inside_its_part(tmp_path):
    """A kill in the middle of one large part resumes after the bytes its last saved state records."""
    import hashlib

    data = bytes(range(256)) * (48 * 1024)  # 12 MiB: a single 32 MiB part
    server, _ = _serve({"/b/one": data}, fail_first=0)
    files = [{"key": "m/one", "path": "one.bin", "size": len(data), "etag": "x-1",
              "url": f"http://127.0.0.1:{server.server_port}/b/one?X-Sig=s"}]
    job = {"dest": str(tmp_path / "dest"), "source": "s3://b/m/", "files": files, "remove": [],
           "stop_after_bytes": 9 << 20}
    try:
        proc, _ = _run_fetcher(job)
        assert proc.returncode == 75
        del job["stop_after_bytes"]
        proc, outcome = _run_fetcher(job)
        assert proc.returncode == 0, proc.stderr
        assert outcome["transferred_bytes"] <= len(data) - (1 << 20)  # resumed inside the part, not at 0
        assert hashlib.sha256((tmp_path / "dest/one.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
    finally:
        server.shutdown()
