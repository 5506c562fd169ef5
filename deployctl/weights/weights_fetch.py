#!/usr/bin/env python3
"""deployctl's host-side weights fetcher: stdlib only, Python >= 3.7 (DevServers have 3.9).

Reads one job (JSON on stdin: pre-signed URLs, sizes, ETags, dest), downloads what is missing in parallel ranged
parts into `<file>.deployctl-partial` (large files with O_DIRECT), hashes the bytes in file order as they land,
renames each file when complete and verified, and keeps the manifest `<dest>/.deployctl-manifest.json`. Progress
goes to stderr (`P done total`), the result to stdout (one JSON line). A URL is a bearer token: it is never
printed, only the object's key.
"""

import errno
import fcntl
import hashlib
import http.client
import json
import mmap
import os
import queue
import random
import re
import sys
import threading
import time
import urllib.parse

MANIFEST = ".deployctl-manifest.json"
PARTIAL = ".deployctl-partial"
RETRY_STATUS = (429, 500, 502, 503, 504)
CHUNK = 1 << 20  # written (and the resume state noted) a chunk at a time
RECV = 256 << 10  # read, then hashed at once while the bytes are in this core's cache
STATE_EVERY = 1 << 20  # save a file's resume state after each MiB written (at most 4 times a second)
HASH_CHUNK = 8 << 20
# Large files are written with O_DIRECT: no copy into the page cache (the costliest part of a buffered write),
# no dirty pages to flush before the rename. Direct I/O needs block-aligned offsets, lengths and buffers.
DIRECT_MIN = 8 << 20
ALIGN = 4096


def aligned_buffer(size):
    """A page-aligned buffer (private anonymous mmap, faulted in at once) usable for O_DIRECT reads and writes."""
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0x8000)))


def round_up(count):
    return (count + ALIGN - 1) // ALIGN * ALIGN


class Fatal(Exception):
    """A failure no retry fixes; the message names the key, never the URL."""


class Progress(object):
    def __init__(self, total):
        self.total, self.done, self.transferred = total, 0, 0
        self.lock = threading.Lock()

    def add(self, count, transferred=True):
        with self.lock:
            self.done += count
            if transferred:
                self.transferred += count

    def report(self):
        try:
            sys.stderr.write("P %d %d\n" % (self.done, self.total))
            sys.stderr.flush()
        except (BrokenPipeError, OSError):
            os._exit(141)  # the control side went away (Ctrl-C, lost connection): stop now


class Connections(threading.local):
    """One keep-alive HTTP(S) connection per thread and server."""

    def get(self, url):
        parts = urllib.parse.urlsplit(url)
        pool = self.__dict__.setdefault("pool", {})
        key = (parts.scheme, parts.netloc)
        if key not in pool:
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            pool[key] = cls(parts.netloc, timeout=60)
        path = parts.path + ("?" + parts.query if parts.query else "")
        return key, pool[key], path

    def drop(self, key):
        conn = self.__dict__.get("pool", {}).pop(key, None)
        if conn is not None:
            conn.close()


def quoted(etag):
    """An ETag as If-Match carries it (RFC 9110: a quoted string); the listing's quotes were stripped."""
    return '"%s"' % etag.strip('"')


def s3_code(body):
    match = re.search(rb"<Code>([^<]{1,64})</Code>", body or b"")
    return match.group(1).decode("ascii", "replace") if match else ""


def fetch_range(conns, file_job, start, end, progress, attempts, into, base, on_received, on_written):
    """GET bytes [start, end) of one object into `into` (which holds the file from offset `base`) and into the
    partial file, retrying throttling, 5xx and resets. `on_received(offset)` after each read, while its bytes are
    still in this core's cache (hashing); `on_written(offset)` after each chunk is on disk (resume state)."""
    entry = file_job.entry
    offset = start
    delay = 0.2
    for attempt in range(attempts):
        if offset >= end:
            return
        key, conn, path = conns.get(entry["url"])
        try:
            # If-Match: every part comes from the same version of the object (the one listed, whose ETag the
            # manifest records), or the sync stops instead of mixing two versions in one file.
            conn.request("GET", path, headers={"Range": "bytes=%d-%d" % (offset, end - 1),
                                               "If-Match": quoted(entry["etag"])})
            resp = conn.getresponse()
            if resp.status in RETRY_STATUS:
                resp.read()
                raise IOError("HTTP %d" % resp.status)
            if resp.status == 412:
                resp.read()
                raise Fatal("%s: the object changed during the sync (its ETag is no longer %s); run it again"
                            % (entry["key"], entry["etag"]))
            if resp.status not in (200, 206):
                code = s3_code(resp.read())
                raise Fatal("%s: HTTP %d %s" % (entry["key"], resp.status, code))
            if resp.status == 200 and offset != 0:
                raise Fatal("%s: the server ignored the byte range" % entry["key"])
            while offset < end:
                view = into[offset - base:]
                # Whole chunks only: a direct write must be block-aligned (only the file's tail is not).
                want, got = min(CHUNK, end - offset), 0
                while got < want:
                    count = resp.readinto(view[got:min(want, got + RECV)])
                    if not count:
                        raise IOError("connection closed early")
                    got += count
                    on_received(offset + got)
                file_job.write(view, got, offset)
                offset += got
                on_written(offset)
                progress.add(got)
            if resp.length:  # more than asked for: drain so the connection stays usable
                resp.read()
            return
        except Fatal:
            raise
        except (IOError, OSError, http.client.HTTPException) as exc:
            conns.drop(key)
            if attempt == attempts - 1:
                raise Fatal("%s: gave up after %d attempts (last: %s)" % (entry["key"], attempts, exc))
            time.sleep(delay + random.random() * delay)
            delay = min(delay * 2, 5.0)


class BufferPool(object):
    """At most `count` part-sized aligned buffers, made on first need and reused."""

    def __init__(self, size, count):
        self.size, self.count, self.made, self.free = size, count, 0, []
        self.cond = threading.Condition()

    def get(self, errors):
        """A free buffer, waiting for one if all are in use; None once `errors` is not empty."""
        with self.cond:
            while not self.free and self.made >= self.count:
                if errors:
                    return None
                self.cond.wait(0.5)
            if self.free:
                return self.free.pop()
            self.made += 1
        return aligned_buffer(self.size)

    def put(self, buf):
        with self.cond:
            self.free.append(buf)
            self.cond.notify()


class FileJob(object):
    """One object being written: its parts, which are done, and the sha256 that follows them in order.

    The hash cursor (`hashed_to`) is advanced by one thread at a time: the worker whose part holds it hashes each
    read as it lands (still in the CPU cache), and a worker that completes the part before a parked one hashes
    that from memory (under `lock`). Nothing is read back from disk except parts an earlier run left there.
    """

    def __init__(self, dest, entry, part_size, direct_min=DIRECT_MIN):
        self.entry = entry
        self.direct_min = direct_min
        self.final = os.path.join(dest, entry["path"])
        self.partial = self.final + PARTIAL
        self.state_path = self.partial + ".json"
        size = entry["size"]
        self.part_size = part_size
        self.parts = [(s, min(s + part_size, size)) for s in range(0, size, part_size)] or [(0, 0)]
        self.done = [False] * len(self.parts)
        self.written = [0] * len(self.parts)  # bytes on disk from each part's start (resume point)
        self.saved_at, self.saved_time = 0, 0.0  # bytes written, and when, at the last save of the state
        self.hashed_to = 0  # the sha256 (and MD5) cover bytes [0, hashed_to)
        self.parked = {}  # part index -> buffer: fetched before the cursor reached it
        self.on_disk = set()  # parts done by an earlier run: hashed from the file
        self.completed = 0  # parts fetched by this run and handed to complete_part
        self.sha = hashlib.sha256()
        self.md5 = hashlib.md5() if want_md5(entry) else None
        self.lock = threading.Lock()  # the cursor's hand-over and `parked`
        self.state_lock = threading.Lock()  # done/written and the state file: never waits on hashing
        self.fd = None
        self.direct = False

    def open(self):
        os.makedirs(os.path.dirname(self.final), exist_ok=True)
        previous = []
        try:
            with open(self.state_path) as handle:
                state = json.load(handle)
            if state.get("etag") == self.entry["etag"] and state.get("size") == self.entry["size"]:
                previous = state.get("done", [])
                written = state.get("written") or []
                if len(written) == len(self.parts):
                    self.written = [max(0, min(int(w), e - s)) for w, (s, e) in zip(written, self.parts)]
        except (OSError, ValueError, TypeError):
            pass
        if not previous and not any(self.written) and os.path.exists(self.partial):
            os.unlink(self.partial)  # unknown partial content: start over
        flags = os.O_RDWR | os.O_CREAT
        if self.entry["size"] >= self.direct_min and hasattr(os, "O_DIRECT"):
            try:
                self.fd = os.open(self.partial, flags | os.O_DIRECT, 0o644)
                self.direct = True
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # tmpfs and some network filesystems refuse O_DIRECT
                    raise
        if self.fd is None:
            self.fd = os.open(self.partial, flags, 0o644)
        for index in previous:
            if 0 <= index < len(self.done):
                self.done[index] = True
                self.written[index] = self.parts[index][1] - self.parts[index][0]
        self.write_state()
        self.saved_time = 0.0  # the first MiB of new data is saved at once
        self.on_disk = {i for i, d in enumerate(self.done) if d}

    def resume_offset(self, index):
        """Where fetching part `index` starts again: after the bytes already on disk, block-aligned (parts start
        on a block boundary; only the file's end may not be on one)."""
        written = self.parts[index][0] + self.written[index]
        return written if written == self.parts[index][1] else written // ALIGN * ALIGN

    def bytes_kept(self):
        """Bytes an earlier run left that this one does not fetch again (progress starts there)."""
        return sum(self.resume_offset(i) - start for i, (start, _) in enumerate(self.parts))

    def write(self, view, count, offset):
        """Write view[:count] at offset; a direct write of the file's tail is padded (finish() truncates).
        A failed write is fatal: the bytes are hashed already, and a disk error is no network hiccup to retry."""
        try:
            self.write_once(view, count, offset)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise Fatal("%s: no space left on device" % self.entry["key"])
            raise Fatal("%s: cannot write %s: %s" % (self.entry["key"], self.partial, exc.strerror or exc))

    def write_once(self, view, count, offset):
        if self.direct:
            try:
                os.pwrite(self.fd, view[:round_up(count)], offset)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.buffered()
        os.pwrite(self.fd, view[:count], offset)

    def buffered(self):
        """The filesystem refused a direct write after all: go on through the page cache."""
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self.direct = False

    def note_written(self, index, offset):
        """Record part progress; saved every few MiB so a killed sync resumes close to where it stopped."""
        with self.state_lock:
            self.written[index] = offset - self.parts[index][0]
            # At most a few saves a second: each is a file create + rename, costly at full speed.
            if sum(self.written) - self.saved_at >= STATE_EVERY and time.monotonic() - self.saved_time >= 0.25:
                self.write_state()

    def write_state(self):
        if len(self.parts) < 2 and self.entry["size"] < STATE_EVERY:
            return  # a small one-part file restarts from zero: no state worth a write per small file
        self.saved_at, self.saved_time = sum(self.written), time.monotonic()
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump({"etag": self.entry["etag"], "size": self.entry["size"],
                       "done": [i for i, d in enumerate(self.done) if d], "written": self.written}, handle)
        os.replace(tmp, self.state_path)

    def part_done(self, index):
        """Mark a part done (saved at once: a resumed sync skips it)."""
        with self.state_lock:
            self.done[index] = True
            self.write_state()

    def hash_bytes(self, data):
        self.sha.update(data)
        if self.md5 is not None:
            self.md5.update(data)

    def hash_landed(self, buf, start, upto):
        """The worker of the part starting at `start`: hash its bytes up to `upto` if the cursor has reached it.
        Only that worker moves the cursor while it is inside the part (a drain stops at a part in flight)."""
        if start <= self.hashed_to < upto:
            self.hash_bytes(buf[self.hashed_to - start:upto - start])
            self.hashed_to = upto

    def complete_part(self, index, buf, pool):
        """After part `index` is on disk: hash what is left of it, or park it for whoever reaches it; then hash
        the parked (and earlier-run) parts that follow. True for exactly one caller: the last part, when the
        whole file is on disk and hashed (the cursor cannot stop short then: every other part is parked or hashed)."""
        start, end = self.parts[index]
        with self.lock:
            self.completed += 1
            if self.hashed_to < start:
                self.parked[index] = buf
                return False
            self.hash_landed(buf, start, end)
            pool.put(buf)
            hashed = self.drain(pool)
            return hashed and self.completed + len(self.on_disk) == len(self.parts)

    def drain(self, pool):
        """Move the cursor over parts already fetched (parked) or left by an earlier run (on disk); stop at a
        part still in flight or queued (its worker takes over). Called with `lock` held, or before any worker."""
        size = self.entry["size"]
        view = None
        while self.hashed_to < size:
            index = self.hashed_to // self.part_size
            end = self.parts[index][1]
            if index in self.parked:
                buf = self.parked.pop(index)
                self.hash_landed(buf, self.parts[index][0], end)
                pool.put(buf)
            elif index in self.on_disk:
                view = view or aligned_buffer(HASH_CHUNK)
                self.hash_from_disk(end, view)
            else:
                return False
        return True

    def hash_from_disk(self, upto, view):
        """Hash [hashed_to, upto) read back from the file through a reused aligned buffer."""
        while self.hashed_to < upto:
            want = min(len(view), upto - self.hashed_to)
            got = os.preadv(self.fd, [view[:round_up(want) if self.direct else want]], self.hashed_to)
            if not got:
                raise Fatal("%s: short partial file" % self.entry["key"])
            got = min(got, want)  # a direct read may run into the tail's padding
            self.hash_bytes(view[:got])
            self.hashed_to += got

    def read_into(self, view, start, end):
        """Read [start, end) of the partial file into view (a part resumed mid-way: its first bytes)."""
        done = 0
        while done < end - start:
            got = os.preadv(self.fd, [view[done:end - start]], start + done)
            if not got:
                raise Fatal("%s: short partial file" % self.entry["key"])
            done += got

    def finish(self):
        """Verify size (and MD5 where the ETag is one), then rename into place."""
        size = os.fstat(self.fd).st_size
        if size != self.entry["size"]:
            os.ftruncate(self.fd, self.entry["size"]) if size > self.entry["size"] else None
            if os.fstat(self.fd).st_size != self.entry["size"]:
                raise Fatal("%s: got %d bytes, expected %d" % (self.entry["key"], size, self.entry["size"]))
        if self.md5 is not None and self.md5.hexdigest() != self.entry["etag"].strip('"').lower():
            os.close(self.fd)
            for path in (self.partial, self.state_path):
                if os.path.exists(path):
                    os.unlink(path)
            raise Fatal("%s: content does not match its ETag (MD5); it will be fetched again" % self.entry["key"])
        os.fsync(self.fd)
        os.close(self.fd)
        os.replace(self.partial, self.final)
        try:
            os.unlink(self.state_path)
        except OSError:
            pass
        return self.sha.hexdigest()


def want_md5(entry):
    etag = entry["etag"].strip('"').lower()
    return bool(re.match(r"^[0-9a-f]{32}$", etag)) and entry["size"] <= (256 << 20)


class Manifest(object):
    """`<dest>/.deployctl-manifest.json`, rewritten atomically as large files land, at most once a second for
    small ones, and at the end."""

    def __init__(self, dest, source, listed=None):
        self.path = os.path.join(dest, MANIFEST)
        self.lock = threading.Lock()
        self.written = 0.0
        try:
            with open(self.path) as handle:
                self.doc = json.load(handle)
        except (OSError, ValueError):
            self.doc = {}
        self.doc = {"version": 1, "source": source, "files": self.doc.get("files", {})}
        if listed:  # when the source was listed: what an `up` without credentials can tell the user
            self.doc["listed"] = listed

    def record(self, entry, sha):
        with self.lock:
            self.doc["files"][entry["path"]] = {"key": entry["key"], "size": entry["size"],
                                                "etag": entry["etag"], "sha256": sha}
            # A large file is recorded at once (a killed sync must not fetch it again); small ones at most once a
            # second, so thousands of them do not rewrite the manifest thousands of times.
            if entry["size"] >= STATE_EVERY or time.monotonic() - self.written > 1.0:
                self.save_locked()

    def forget(self, path):
        with self.lock:
            self.doc["files"].pop(path, None)

    def save(self):
        with self.lock:
            self.save_locked()

    def save_locked(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(self.doc, handle, sort_keys=True, separators=(",", ":"))
        os.replace(tmp, self.path)
        self.written = time.monotonic()


def queue_order(files, spread):
    """Pending parts, round-robin over groups of `spread` files (each file's parts stay in order): with as many
    files as connections, each file streams on about one connection and is hashed as its bytes land."""
    order = []
    for first in range(0, len(files), spread):
        group = [[(f, i) for i, d in enumerate(f.done) if not d] for f in files[first:first + spread]]
        for index in range(max([len(g) for g in group] or [0])):
            order.extend(pending[index] for pending in group if index < len(pending))
    return order


def run(job):
    dest = job["dest"]
    os.makedirs(dest, exist_ok=True)
    manifest = Manifest(dest, job.get("source", ""), job.get("listed"))
    for path in job.get("remove", []):
        # Only files this program wrote (they are in the manifest) and that left the source.
        if path in manifest.doc["files"]:
            try:
                os.unlink(os.path.join(dest, path))
            except OSError:
                pass
            manifest.forget(path)
    part_size = round_up(int(job.get("part_size", 8 << 20)))
    direct_min = int(job.get("direct_min", DIRECT_MIN))
    concurrency = int(job.get("concurrency", 8))
    attempts = int(job.get("attempts", 8))
    entries = job.get("files", [])
    progress = Progress(sum(e["size"] for e in entries))
    files = []
    for entry in entries:
        file_job = FileJob(dest, entry, part_size, direct_min)
        file_job.open()
        progress.add(file_job.bytes_kept(), transferred=False)
        files.append(file_job)
    tasks = queue.Queue()
    for task in queue_order(files, int(job.get("spread", concurrency))):
        tasks.put(task)
    # A worker holds a part-sized buffer before it takes a part, and parts are taken in order: the part the
    # cursor waits for is always in flight or done, so parked parts (bounded by the pool) never block it.
    largest = max([end - start for f in files for start, end in f.parts] or [0])
    pool = BufferPool(round_up(max(1, largest)), concurrency + 4)
    errors = []
    conns = Connections()

    def finish(file_job):
        manifest.record(file_job.entry, file_job.finish())

    # Parts an earlier run left on disk at the start of a file: hash them now (a file may be complete already).
    for file_job in files:
        if file_job.on_disk and file_job.drain(pool) and all(file_job.done):
            finish(file_job)

    def worker():
        while not errors:
            buf = pool.get(errors)
            if buf is None:
                return
            try:
                file_job, index = tasks.get_nowait()
            except queue.Empty:
                pool.put(buf)
                return
            start, end = file_job.parts[index]
            try:
                resume = file_job.resume_offset(index)
                file_job.read_into(buf, start, resume)
                fetch_range(conns, file_job, resume, end, progress, attempts, buf, start,
                            lambda offset, f=file_job, b=buf, s=start: f.hash_landed(b, s, offset),
                            lambda offset, f=file_job, i=index: f.note_written(i, offset))
                file_job.part_done(index)
                if file_job.complete_part(index, buf, pool):
                    finish(file_job)
            except Fatal as exc:
                errors.append(str(exc))
            except OSError as exc:
                errors.append("%s: %s" % (file_job.entry["key"], exc.strerror or exc))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        progress.report()
        for thread in threads:
            if thread.is_alive():
                thread.join(0.5)
                break
    progress.report()
    if not errors:
        errors.extend("%s: parts missing after all fetches ended" % f.entry["key"]
                      for f in files if f.hashed_to < f.entry["size"])
    manifest.save()
    errors = list(dict.fromkeys(errors))  # several parts of one file may fail the same way: say it once
    result = {"transferred_bytes": progress.transferred, "manifest": manifest.doc["files"], "errors": errors}
    sys.stdout.write(json.dumps(result) + "\n")
    return 1 if errors else 0


def main():
    job = json.loads(sys.stdin.read())
    try:
        return run(job)
    except Fatal as exc:
        sys.stdout.write(json.dumps({"transferred_bytes": 0, "manifest": None, "errors": [str(exc)]}) + "\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
