"""The host-side fetcher (deployctl/weights/weights_fetch.py), run as the hosts run it, against a local HTTP server:
ranged parts, retries, resume, parts finishing out of order, direct I/O, verification, the manifest."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

FETCHER = Path(__file__).resolve().parents[2] / "deployctl" / "weights" / "weights_fetch.py"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def _serve(blobs: dict, fail_first: int = 0, delays: dict | None = None, etags: dict | None = None,
           pause_at: dict | None = None):
    """An S3-like server for pre-signed GETs; `delays` maps (path, range start) to seconds to wait before answering,
    `etags` a path to the ETag its If-Match must carry. `pause_at` maps a path to an offset: a response reaching it
    sends the bytes before it, signals `paused` and waits for `release` (the test kills the fetcher meanwhile)."""
    state = {"fails": fail_first, "requests": 0, "ranges": [], "answered": [], "paused": threading.Semaphore(0),
             "release": threading.Event()}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            with lock:
                state["requests"] += 1
                failing = state["fails"] > 0
                state["fails"] -= failing
            if failing:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path = self.path.split("?")[0]
            data = blobs[path]
            if etags and path in etags and self.headers.get("If-Match") != etags[path]:
                body = b"<Error><Code>PreconditionFailed</Code></Error>"
                self.send_response(412)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            start, end = 0, len(data) - 1
            if "Range" in self.headers:
                first, last = self.headers["Range"].split("=")[1].split("-")
                start, end = int(first), int(last)
            with lock:
                state["ranges"].append((path, start, end + 1))
            time.sleep((delays or {}).get((path, start), 0))
            self.send_response(206 if "Range" in self.headers else 200)
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            stop = (pause_at or {}).get(path)
            if stop is not None and stop <= end and not state["release"].is_set():  # released: serve all
                self.wfile.write(data[start:max(start, stop)])
                self.wfile.flush()
                state["paused"].release()
                state["release"].wait(60)
                return
            self.wfile.write(data[start:end + 1])
            with lock:
                state["answered"].append((path, start))

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state


def _run_fetcher(job: dict):
    proc = subprocess.run([sys.executable, str(FETCHER)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=120)
    return proc, (json.loads(proc.stdout.splitlines()[-1]) if proc.stdout.strip() else None)


def _start_fetcher(job: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(FETCHER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    return proc


def _kill(proc: subprocess.Popen, state: dict, paused: int = 1, saved=None) -> None:
    """SIGKILL the fetcher once `paused` responses are held by the server (and `saved()` holds, when given)."""
    for _ in range(paused):
        assert state["paused"].acquire(timeout=60)
    if saved is not None:
        deadline = time.monotonic() + 60
        while not saved():  # the fetcher writes its resume state as the bytes before the pause land
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
    proc.kill()
    assert proc.wait(timeout=60) == -9
    proc.stdout.close()
    proc.stderr.close()
    state["release"].set()


def _fetcher_module():
    spec = importlib.util.spec_from_file_location("weights_fetch_under_test", FETCHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(server, key: str, path: str, data: bytes, etag: str = "x-2") -> dict:
    return {"key": key, "path": path, "size": len(data), "etag": etag,
            "url": f"http://127.0.0.1:{server.server_port}/b/{key}?X-Sig=s"}


def test_fetcher_parts_retries_resume_and_manifest(tmp_path):
    big = bytes(range(256)) * 4000  # 1 024 000 bytes, 8 parts of 128 KiB
    small = b'{"a": 1}'
    server, state = _serve({"/b/m/big": big, "/b/m/small": small}, fail_first=3, pause_at={"/b/m/big": 300000})
    files = [_entry(server, "m/big", "w/big.bin", big),
             _entry(server, "m/small", "c.json", small, etag=hashlib.md5(small).hexdigest())]
    job = {"dest": str(tmp_path / "dest"), "source": "s3://b/m/", "part_size": 131072, "concurrency": 1,
           "files": files, "remove": []}
    # The third part is being read when the fetcher is killed: parts 0 and 1 are done (it asked for part 2).
    _kill(_start_fetcher(job), state)
    assert not (tmp_path / "dest/w/big.bin").exists() and (tmp_path / "dest/w/big.bin.deployctl-partial").exists()

    server.shutdown()
    server, state = _serve({"/b/m/big": big, "/b/m/small": small})
    job["files"] = [_entry(server, "m/big", "w/big.bin", big),
                    _entry(server, "m/small", "c.json", small, etag=hashlib.md5(small).hexdigest())]
    proc, outcome = _run_fetcher(job)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "dest/w/big.bin").read_bytes() == big
    assert (tmp_path / "dest/c.json").read_bytes() == small
    # The first run finished 2 parts (262144 bytes) before it was killed: only the rest moved now.
    assert outcome["transferred_bytes"] == len(big) + len(small) - 262144
    assert outcome["manifest"]["w/big.bin"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert sorted(p.name for p in (tmp_path / "dest").rglob("*")) == [".deployctl-manifest.json", "big.bin",
                                                                        "c.json", "w"]
    server.shutdown()


def test_fetcher_rejects_content_that_does_not_match_its_md5_etag(tmp_path):
    server, _ = _serve({"/b/x": b"hello"})
    files = [{"key": "m/x", "path": "x", "size": 5, "etag": "0" * 32,
              "url": f"http://127.0.0.1:{server.server_port}/b/x?X-Sig=s"}]
    proc, outcome = _run_fetcher({"dest": str(tmp_path), "files": files, "part_size": 1 << 20})
    assert proc.returncode == 1 and "does not match its ETag" in outcome["errors"][0]
    assert "X-Sig" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".deployctl-manifest.json"]
    server.shutdown()


def test_a_one_part_file_resumes_inside_its_part(tmp_path):
    """A kill in the middle of one large part resumes after the bytes its last saved state records."""
    data = bytes(range(256)) * (48 * 1024)  # 12 MiB: a single 16 MiB part
    server, state = _serve({"/b/m/one": data}, pause_at={"/b/m/one": 9 << 20})
    job = {"dest": str(tmp_path / "dest"), "source": "s3://b/m/", "files": [_entry(server, "m/one", "one.bin", data)],
           "remove": [], "part_size": 16 << 20}
    state_file = tmp_path / "dest/one.bin.deployctl-partial.json"

    def saved():
        try:
            return json.loads(state_file.read_text())["written"][0] >= 1 << 20
        except (OSError, ValueError):
            return False

    try:
        _kill(_start_fetcher(job), state, saved=saved)
        proc, outcome = _run_fetcher(job)
        assert proc.returncode == 0, proc.stderr
        assert outcome["transferred_bytes"] <= len(data) - (1 << 20)  # resumed inside the part, not at 0
        assert hashlib.sha256((tmp_path / "dest/one.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
    finally:
        server.shutdown()


def test_parts_finishing_out_of_order_wait_in_memory_and_are_hashed_in_order(tmp_path):
    """The first parts answer late: the later ones land first, wait in the (bounded) buffer pool, and the sha256
    still covers the bytes in file order. Two files share the connections; nothing deadlocks."""
    part = 64 << 10
    one = os.urandom(40 * part + 1000)
    two = os.urandom(17 * part)
    server, state = _serve({"/b/m/one": one, "/b/m/two": two},
                           delays={("/b/m/one", 0): 0.6, ("/b/m/one", 3 * part): 0.3, ("/b/m/two", 0): 0.4})
    files = [_entry(server, "m/one", "one.bin", one), _entry(server, "m/two", "sub/two.bin", two)]
    job = {"dest": str(tmp_path), "source": "s3://b/m/", "files": files, "part_size": part, "concurrency": 6,
           "spread": 1, "direct_min": 0}
    try:
        proc, outcome = _run_fetcher(job)
        assert proc.returncode == 0, proc.stderr
        for name, data in (("one.bin", one), ("sub/two.bin", two)):
            assert (tmp_path / name).read_bytes() == data
            assert outcome["manifest"][name]["sha256"] == hashlib.sha256(data).hexdigest()
        assert outcome["transferred_bytes"] == len(one) + len(two)
        starts = [(path, start) for path, start, _ in state["ranges"]]
        assert sorted(starts) == sorted(set(starts)) and len(starts) == 41 + 17  # each part exactly once
        # Many later parts landed before the first one: they waited in memory (the pool holds 10 buffers).
        assert state["answered"].index(("/b/m/one", 0)) >= 5
    finally:
        server.shutdown()


def test_direct_io_with_an_unaligned_tail_resumes_and_ends_at_the_exact_size(tmp_path):
    data = os.urandom(3 * (1 << 20) + 1234)
    server, state = _serve({"/b/m/w": data}, pause_at={"/b/m/w": 2 << 20})
    job = {"dest": str(tmp_path), "source": "s3://b/m/", "files": [_entry(server, "m/w", "w.bin", data)],
           "part_size": 1 << 20, "concurrency": 2, "direct_min": 0}
    try:
        _kill(_start_fetcher(job), state, paused=2)  # parts 2 and 3 asked for: 0 and 1 are done
        assert not (tmp_path / "w.bin").exists()
        proc, outcome = _run_fetcher(job)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "w.bin").stat().st_size == len(data)  # the padded direct write of the tail is cut
        assert (tmp_path / "w.bin").read_bytes() == data
        assert outcome["manifest"]["w.bin"]["sha256"] == hashlib.sha256(data).hexdigest()
        assert outcome["transferred_bytes"] == len(data) - (2 << 20)
    finally:
        server.shutdown()


def test_parts_an_earlier_run_left_mid_file_are_hashed_from_disk_not_fetched(tmp_path):
    part = 1 << 20
    data = os.urandom(5 * part)
    partial = tmp_path / "w.bin.deployctl-partial"
    with open(partial, "wb") as handle:
        for index in (1, 3):
            handle.seek(index * part)
            handle.write(data[index * part:(index + 1) * part])
    (tmp_path / "w.bin.deployctl-partial.json").write_text(json.dumps(
        {"etag": "x-2", "size": len(data), "done": [1, 3], "written": [0, part, 0, part, 0]}))
    server, state = _serve({"/b/m/w": data})
    job = {"dest": str(tmp_path), "source": "s3://b/m/", "files": [_entry(server, "m/w", "w.bin", data)],
           "part_size": part, "concurrency": 3, "direct_min": 0}
    try:
        proc, outcome = _run_fetcher(job)
        assert proc.returncode == 0, proc.stderr
        assert sorted(start for _, start, _ in state["ranges"]) == [0, 2 * part, 4 * part]
        assert outcome["transferred_bytes"] == 3 * part
        assert (tmp_path / "w.bin").read_bytes() == data
        assert outcome["manifest"]["w.bin"]["sha256"] == hashlib.sha256(data).hexdigest()
        assert sorted(p.name for p in tmp_path.iterdir()) == [".deployctl-manifest.json", "w.bin"]
    finally:
        server.shutdown()


def test_a_refused_direct_write_goes_on_through_the_page_cache(tmp_path, monkeypatch):
    """Some filesystems accept O_DIRECT at open and refuse the writes (EINVAL): the file goes on buffered."""
    fetch = _fetcher_module()
    entry = {"key": "m/w", "path": "w.bin", "size": 3 * 4096 + 5, "etag": "x-1", "url": "http://unused"}
    job = fetch.FileJob(str(tmp_path), entry, 1 << 20, direct_min=0)
    job.open()
    assert job.direct and fcntl.fcntl(job.fd, fcntl.F_GETFL) & os.O_DIRECT
    real_pwrite = os.pwrite

    def refusing_pwrite(fd, data, offset):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", refusing_pwrite)
    view = fetch.aligned_buffer(1 << 20)
    view[:entry["size"]] = b"a" * entry["size"]
    job.write(view, entry["size"], 0)
    assert not job.direct and not fcntl.fcntl(job.fd, fcntl.F_GETFL) & os.O_DIRECT
    job.hash_bytes(view[:entry["size"]])
    job.hashed_to = entry["size"]
    assert job.finish() == hashlib.sha256(b"a" * entry["size"]).hexdigest()
    assert (tmp_path / "w.bin").read_bytes() == b"a" * entry["size"]


def test_a_disk_error_is_fatal_and_names_the_file(tmp_path, monkeypatch):
    fetch = _fetcher_module()
    entry = {"key": "m/w", "path": "w.bin", "size": 10, "etag": "x-1", "url": "http://unused"}
    job = fetch.FileJob(str(tmp_path), entry, 1 << 20)
    job.open()

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    try:
        job.write(fetch.aligned_buffer(4096), 10, 0)
    except fetch.Fatal as exc:
        assert str(exc) == "m/w: no space left on device"
    else:
        raise AssertionError("a full disk must stop the fetch")


def test_the_fetcher_is_python_37_and_stdlib_only():
    """DevServers have Python 3.9 and nothing installed: the fetcher must parse as 3.7 and import only stdlib."""
    import ast

    tree = ast.parse(FETCHER.read_text(), feature_version=(3, 7))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_an_object_replaced_during_the_sync_stops_it_instead_of_mixing_versions(tmp_path):
    data = os.urandom(300000)
    # The job carries ETags as listed (quotes stripped); If-Match must carry them quoted, as S3 expects.
    server, _ = _serve({"/b/m/w": data}, etags={"/b/m/w": '"new-3"'})
    entry = {**_entry(server, "m/w", "w.bin", data), "etag": "old-3"}
    try:
        proc, outcome = _run_fetcher({"dest": str(tmp_path), "files": [entry], "part_size": 131072})
        assert proc.returncode == 1
        assert outcome["errors"] == ["m/w: the object changed during the sync (its ETag is no longer old-3); "
                                     "run it again"]
        assert not (tmp_path / "w.bin").exists()
        entry["etag"] = "new-3"
        proc, outcome = _run_fetcher({"dest": str(tmp_path), "files": [entry], "part_size": 131072})
        assert proc.returncode == 0 and (tmp_path / "w.bin").read_bytes() == data
    finally:
        server.shutdown()


def test_the_end_of_a_sync_is_durable_files_their_directories_and_the_manifest(tmp_path, monkeypatch, capsys):
    """As `cp` + `sync` would leave it: each file fsynced before its rename, then the directories holding the new
    names, then the manifest (fsynced before its rename) and dest itself; nothing left for the page cache alone."""
    fetch = _fetcher_module()
    top, nested = os.urandom(3000), os.urandom(5000)
    server, _ = _serve({"/b/m/top": top, "/b/m/nested": nested})
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    dest = tmp_path / "dest"
    job = {"dest": str(dest), "source": "s3://b/m/", "part_size": 1 << 20,
           "files": [_entry(server, "m/top", "top.bin", top), _entry(server, "m/nested", "sub/deep/n.bin", nested)]}
    try:
        assert fetch.run(job) == 0
    finally:
        server.shutdown()
    assert json.loads(capsys.readouterr().out)["errors"] == []
    partials = {str(dest / "top.bin") + fetch.PARTIAL, str(dest / "sub/deep/n.bin") + fetch.PARTIAL}
    assert partials <= set(synced)  # each file's bytes before its rename
    manifest_tmp = str(dest / fetch.MANIFEST) + ".tmp"
    assert str(dest / "sub/deep") in synced and manifest_tmp in synced
    # The renames' directory before the manifest that names the files; dest (the manifest's own rename) last.
    assert synced.index(str(dest / "sub/deep")) < synced.index(manifest_tmp) < synced.index(str(dest))
    assert (dest / "sub/deep/n.bin").read_bytes() == nested and (dest / "top.bin").read_bytes() == top


def test_part_buffers_are_page_aligned_for_direct_io_with_or_without_madvise(tmp_path, monkeypatch):
    """Huge pages where the kernel and Python offer madvise; Python 3.7 (no mmap.madvise) gets plain populated
    pages. Either buffer takes a direct write, which needs block-aligned memory."""
    import mmap as real_mmap
    import types

    fetch = _fetcher_module()
    plain = types.SimpleNamespace(mmap=real_mmap.mmap, MAP_PRIVATE=real_mmap.MAP_PRIVATE, PAGESIZE=real_mmap.PAGESIZE,
                                  MAP_POPULATE=getattr(real_mmap, "MAP_POPULATE", 0x8000))  # no MADV_HUGEPAGE
    for module in (real_mmap, plain):
        monkeypatch.setattr(fetch, "mmap", module)
        view = fetch.aligned_buffer(4 << 20)
        assert len(view) == 4 << 20 and not any(view[::4096])
        view[:8192] = b"z" * 8192
        target = tmp_path / f"direct-{id(module)}"
        fd = os.open(target, os.O_RDWR | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o644)
        try:
            assert os.pwrite(fd, view[:8192], 0) == 8192
        except OSError as exc:
            assert exc.errno == errno.EINVAL  # tmpfs refuses O_DIRECT writes: alignment is not what failed
            os.close(fd)
            continue
        os.close(fd)
        assert target.read_bytes() == b"z" * 8192
