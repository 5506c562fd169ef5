#!/usr/bin/env python3
"""deployctl's host-side weights fetcher: stdlib only, Python >= 3.7 (DevServers have 3.9).

Reads one job (JSON on stdin: pre-signed URLs, sizes, ETags, dest), downloads what is missing in parallel ranged
parts into `<file>.deployctl-partial` (large files with O_DIRECT), hashes the bytes in file order as they land,
renames each file when complete and verified, and keeps the manifest `<dest>/.deployctl-manifest.json`. Progress
goes to stderr (`P done total`), the result to stdout (one JSON line). A URL is a bearer token: it is never
printed, only the object's key.

With a `swarm` in the job (several hosts fetch the same files), each part has one owner among the hosts that need
it: the owner reads it from the source, every other host pulls it from the owner over the cluster network
(HTTP on the owner's address, a per-deployment token on every request), verified by the sha256 the owner took of
the bytes the source sent. The source's egress carries one copy whatever the number of hosts.
"""

import errno
import fcntl
import hashlib
import hmac
import http.client
import http.server
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
import zlib

MANIFEST = ".deployctl-manifest.json"
PARTIAL = ".deployctl-partial"
RETRY_STATUS = (429, 500, 502, 503, 504)
# Written (and the resume state noted) a chunk at a time: a direct write costs the kernel a fixed part per call
# (pinning the buffer's pages, building the request), so 4 MiB writes cost about half the CPU of 1 MiB ones.
CHUNK = 4 << 20
# Read, then hashed at once: 1 MiB reads take a quarter of the Python calls (and GIL hand-overs) of 256 KiB ones;
# sha256 runs at the core's speed (SHA-NI) from memory or cache alike, so a larger read costs it nothing.
RECV = 1 << 20
STATE_EVERY = 1 << 20  # save a file's resume state after each MiB written (at most 4 times a second)
HASH_CHUNK = 8 << 20
# Large files are written with O_DIRECT: no copy into the page cache (the costliest part of a buffered write),
# no dirty pages to flush before the rename. Direct I/O needs block-aligned offsets, lengths and buffers.
DIRECT_MIN = 8 << 20
ALIGN = 4096


MADV_POPULATE_WRITE = 23  # Linux 5.14: fault a range in, writable, in one call (older kernels: EINVAL)


def aligned_buffer(size):
    """A page-aligned buffer (private anonymous mmap, faulted in at once) usable for O_DIRECT reads and writes.

    Backed by transparent huge pages where the kernel allows them (`madvise` mode is the common default): the
    receive copy, the sha256 and each direct write's page pinning then walk 2 MiB pages instead of 4 KiB ones,
    which measurably cuts the fetcher's system time. Python 3.7 (no mmap.madvise) gets plain pages."""
    madvise = getattr(mmap.mmap, "madvise", None)
    huge = getattr(mmap, "MADV_HUGEPAGE", None)
    if madvise is None or huge is None:
        return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0x8000)))
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    try:
        buf.madvise(huge)
    except OSError:
        pass  # THP off or unsupported: plain pages
    try:
        buf.madvise(MADV_POPULATE_WRITE)
    except (OSError, ValueError):
        buf[::mmap.PAGESIZE] = bytes(len(range(0, size, mmap.PAGESIZE)))  # touch every page: fault it in now
    return memoryview(buf)


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

    def get(self, url, timeout=60):
        parts = urllib.parse.urlsplit(url)
        pool = self.__dict__.setdefault("pool", {})
        key = (parts.scheme, parts.netloc)
        if key not in pool:
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            pool[key] = cls(parts.netloc, timeout=timeout)
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
        # With two queues (source and peers) parts may land far ahead of the cursor: past `park_limit` parked
        # buffers a part goes back to the pool and is hashed from disk later, so no worker waits for a buffer
        # that only the cursor's part could free. None: one queue in file order, parking never blocks it.
        self.park_limit = None
        self.spilled = set()
        self.swarm = None  # the Swarm that serves this file's parts to peers, if any
        self.part_sha = {}  # part index -> sha256 of its bytes as the source sent them (what peers verify)
        self.finished = False  # renamed into place
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
            if not isinstance(state, dict):
                raise ValueError("not a part state")  # damaged: the file starts over
            if state.get("etag") == self.entry["etag"] and state.get("size") == self.entry["size"]:
                previous = state.get("done", [])
                if not isinstance(previous, list) or not all(
                        type(i) is int and 0 <= i < len(self.parts) for i in previous):
                    raise ValueError("damaged list of done parts")
                written = state.get("written") or []
                if len(written) == len(self.parts):
                    self.written = [max(0, min(int(w), e - s)) for w, (s, e) in zip(written, self.parts)]
                self.part_sha = {int(i): h for i, h in (state.get("sha") or {}).items() if int(i) in previous}
                if not all(isinstance(h, str) for h in self.part_sha.values()):
                    raise ValueError("damaged part digests")
        except (OSError, ValueError, TypeError, AttributeError, OverflowError, RecursionError):
            previous, self.written, self.part_sha = [], [0] * len(self.parts), {}
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
        if self.swarm is not None:
            self.swarm.verified()  # peers streaming this part may read the new bytes

    def write_state(self):
        if len(self.parts) < 2 and self.entry["size"] < STATE_EVERY:
            return  # a small one-part file restarts from zero: no state worth a write per small file
        self.saved_at, self.saved_time = sum(self.written), time.monotonic()
        tmp = self.state_path + ".tmp"
        state = {"etag": self.entry["etag"], "size": self.entry["size"],
                 "done": [i for i, d in enumerate(self.done) if d], "written": self.written}
        if self.part_sha:  # a resumed host serves its parts to peers with the hashes taken when they arrived
            state["sha"] = dict((str(i), h) for i, h in self.part_sha.items())
        with open(tmp, "w") as handle:
            json.dump(state, handle)
        os.replace(tmp, self.state_path)

    def part_done(self, index, sha=None):
        """Mark a part done (saved at once: a resumed sync skips it), with its sha256 when peers verify it."""
        with self.state_lock:
            self.done[index] = True
            if sha is not None:
                self.part_sha[index] = sha
            self.write_state()
        if sha is not None and self.swarm is not None:
            self.swarm.verified()

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
                if self.park_limit is not None and len(self.parked) >= self.park_limit:
                    self.spilled.add(index)
                    pool.put(buf)
                else:
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
            elif index in self.on_disk or index in self.spilled:
                view = view or aligned_buffer(HASH_CHUNK)
                # An earlier run's part without a recorded hash: take it now, so peers can have it.
                part = hashlib.sha256() if self.swarm is not None and index not in self.part_sha else None
                self.hash_from_disk(end, view, part)
                if part is not None:
                    with self.state_lock:
                        self.part_sha[index] = part.hexdigest()
                    self.swarm.verified()
            else:
                return False
        return True

    def hash_from_disk(self, upto, view, part=None):
        """Hash [hashed_to, upto) read back from the file through a reused aligned buffer."""
        while self.hashed_to < upto:
            want = min(len(view), upto - self.hashed_to)
            got = os.preadv(self.fd, [view[:round_up(want) if self.direct else want]], self.hashed_to)
            if not got:
                raise Fatal("%s: short partial file" % self.entry["key"])
            got = min(got, want)  # a direct read may run into the tail's padding
            self.hash_bytes(view[:got])
            if part is not None:
                part.update(view[:got])
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
        self.finished = True
        try:
            os.unlink(self.state_path)
        except OSError:
            pass
        return self.sha.hexdigest()


def want_md5(entry):
    etag = entry["etag"].strip('"').lower()
    return bool(re.match(r"^[0-9a-f]{32}$", etag)) and entry["size"] <= (256 << 20)


def sound_entry(entry):
    """A manifest entry that can vouch for its file (deployctl/weights/manifest.py's _entry_problem, as a host runs
    it): a whole size in st_size's range, and text etag and sha256."""
    return (isinstance(entry, dict) and type(entry.get("size")) is int and 0 <= entry["size"] < 2 ** 63
            and isinstance(entry.get("etag"), str) and isinstance(entry.get("sha256"), str))


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
        except (OSError, ValueError, RecursionError):
            self.doc = {}
        # A damaged manifest (the controller said so in its plan) is rebuilt: only sound entries are kept.
        files = self.doc.get("files") if isinstance(self.doc, dict) else None
        files = {path: entry for path, entry in files.items() if sound_entry(entry)} if isinstance(files, dict) else {}
        self.doc = {"version": 1, "source": source, "files": files}
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

    def save(self, durable=False):
        """Rewrite the manifest; `durable`: the last save of a run, on disk before the fetcher says done."""
        with self.lock:
            self.save_locked(durable)

    def save_locked(self, durable=False):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(self.doc, handle, sort_keys=True, separators=(",", ":"))
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        if durable:
            fsync_dir(os.path.dirname(self.path))
        self.written = time.monotonic()


def fsync_dir(path):
    """Make the names created or renamed in a directory durable (its entries, not only the files' bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory: nothing more to do there
    finally:
        os.close(fd)


# Seconds a peer may go without a sign of progress before what this host waits for from it comes from elsewhere:
# one that never answered (not started), one whose parts stopped moving (stalled or stopped), one that no longer
# asks this host for anything and is not done (this host then stops serving it). The job's swarm may set it
# (`peer_wait`); a wait on a peer ends within about twice this (a read in flight has it as its socket timeout).
PEER_WAIT = 60.0
PEER_POLL = 20.0  # at most: seconds a peer's server holds a request for a part it has not got yet (then 409)


class Swarm(object):
    """This host's place among the hosts that fetch the same files: who owns each part, the server that hands
    out the parts this host holds, and what the others have said about their own progress.

    A part is owned by one of the hosts that need its file (round-robin, shifted per file so one-part files
    spread too); the owner reads it from the source and the others from the owner."""

    def __init__(self, conf):
        self.token = conf["token"].encode("utf-8")
        self.me = conf["me"]
        self.peers = dict((name, (addr, int(port))) for name, (addr, port) in conf["peers"].items())
        self.files = {}  # path -> FileJob, what the server may hand out
        self.cond = threading.Condition()
        self.finished = False  # this host's own work is over (done or failed): it only serves from now on
        self.stopped = False  # failed: requests waiting for a part get "gone" at once
        self.seen = set()  # peers that answered at least once
        self.started = time.monotonic()
        self.counts = {"peer_bytes": 0, "source_bytes": 0, "rejected": 0, "fallback_parts": 0}
        self.server = None
        self.wait = float(conf.get("peer_wait", PEER_WAIT))
        self.poll = min(PEER_POLL, self.wait / 3)  # a held request answers well inside a peer's socket timeout
        self.progress = None  # this host's Progress: its bytes on disk, the sign of life peers read
        self.heard = {}  # peer -> (its last reported bytes, when that last changed)
        self.alive = {}  # peer -> when it last answered this host
        self.received = 0  # bytes of parts from peers received so far (on disk only once the part is whole)
        self.received_lock = threading.Lock()

    def landed(self, count):
        with self.received_lock:
            self.received += count

    def done_bytes(self):
        """What peers read as this host's sign of life: bytes on disk plus bytes of peers' parts in flight."""
        return (self.progress.done if self.progress is not None else 0) + self.received

    def moved(self, peer, value):
        """Note a peer's reported bytes on disk; the seconds since they last changed (0 when they just did)."""
        now = time.monotonic()
        last = self.heard.get(peer)
        if last is None or last[0] != value:
            self.heard[peer] = (value, now)
            return 0.0
        return now - last[1]

    def warn(self, text):
        try:
            sys.stderr.write("W %s\n" % text)
            sys.stderr.flush()
        except (BrokenPipeError, OSError):
            pass

    def owner(self, file_job, index):
        holders = file_job.entry.get("holders") or [self.me]
        return holders[(index + zlib.crc32(file_job.entry["path"].encode("utf-8"))) % len(holders)]

    def count(self, name, amount=1):
        with self.cond:
            self.counts[name] += amount

    def verified(self):
        """A part's hash was recorded: wake the requests waiting for it."""
        with self.cond:
            self.cond.notify_all()

    def wait_part(self, file_job, index, seconds):
        """The part's sha256 once this host holds it verified, waiting up to `seconds`; None if not yet."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while index not in file_job.part_sha and not self.stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return file_job.part_sha.get(index)

    def wait_bytes(self, file_job, index, sent, seconds):
        """Bytes of the part on disk (from its start) once more than `sent` are, or all of it once it is
        complete (a zero-byte part is complete with nothing sent), waiting up to `seconds`; None if none more
        came, or this host stopped."""
        deadline = time.monotonic() + seconds
        with self.cond:
            while True:
                if self.stopped:
                    return None
                have = file_job.written[index]
                if index in file_job.part_sha:
                    # Complete: a part of 0 bytes has nothing "more than sent" to wait for.
                    return file_job.parts[index][1] - file_job.parts[index][0]
                if have > sent:
                    return have
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 1.0))

    def authorized(self, header):
        return hmac.compare_digest((header or "").encode("utf-8", "replace"), b"Bearer " + self.token)

    def serve(self):
        """Listen on this host's cluster address; False when the port cannot be had (peers then read this host's
        share from the source)."""
        swarm = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, status, body=b"", headers=()):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def not_yet(self):
                """409: not yet, with this host's bytes on disk (the asker falls back when they stop moving);
                410: this host stopped and will not have it."""
                if swarm.stopped:
                    self.answer(410)
                else:
                    self.answer(409, headers=(("X-Done", str(swarm.done_bytes())),))

            def do_GET(self):
                if not swarm.authorized(self.headers.get("Authorization")):
                    self.answer(403, b"wrong token")
                    return
                # A peer that asked is running: once it stops answering it has ended (not: not started yet).
                if self.headers.get("X-Peer") in swarm.peers:
                    swarm.seen.add(self.headers["X-Peer"])
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/done":  # "1", or "0 <bytes on disk>": a peer's sign of life while it works
                    self.answer(200, b"1" if swarm.finished else ("0 %d" % swarm.done_bytes()).encode("ascii"))
                    return
                query = urllib.parse.parse_qs(url.query)
                file_job = swarm.files.get((query.get("path") or [""])[0])
                try:
                    index = int((query.get("index") or ["-1"])[0])
                except ValueError:
                    index = -1
                if url.path not in ("/part", "/sha") or file_job is None or not 0 <= index < len(file_job.parts):
                    self.answer(404, b"no such part")
                    return
                if url.path == "/sha":
                    # The hash of the part as the source sent it: once this host has all of it.
                    sha = swarm.wait_part(file_job, index, swarm.poll)
                    if sha is None:  # 409: not yet (ask again); 410: this host stopped and will not have it
                        self.not_yet()
                    else:
                        self.answer(200, sha.encode("ascii"))
                    return
                if swarm.wait_bytes(file_job, index, 0, swarm.poll) is None:
                    self.not_yet()
                    return
                self.stream_part(file_job, index)

            def stream_part(self, file_job, index):
                """The part's bytes as they reach this host's disk (a peer need not wait for the whole part:
                it checks the part's hash, from /sha, once it has all of it)."""
                start, end = file_job.parts[index]
                handle = None
                for path in ((file_job.final, file_job.partial) if file_job.finished
                             else (file_job.partial, file_job.final)):
                    try:
                        handle = open(path, "rb")
                        break
                    except OSError:
                        continue
                if handle is None:
                    self.answer(410)
                    return
                with handle:
                    self.send_response(200)
                    self.send_header("Content-Length", str(end - start))
                    self.end_headers()
                    sent = 0
                    while sent < end - start:
                        have = swarm.wait_bytes(file_job, index, sent, swarm.wait)
                        if have is None:  # stopped or stalled: the peer sees a short answer, reads it elsewhere
                            self.close_connection = True
                            return
                        # From the page cache to the socket: no copy through this process.
                        self.connection.sendfile(handle, start + sent, have - sent)
                        sent = have

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # a peer that went away mid-part: it asks again or reads the part from the source

        try:
            self.server = Server(self.peers[self.me], Handler)
        except (OSError, KeyError) as exc:
            sys.stderr.write("W cannot serve parts to peers: %s\n" % exc)
            return False
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return True

    def ask(self, conns, peer, path_and_query):
        """One GET to a peer: (status, response) or raises what http.client raises."""
        address, port = self.peers[peer]
        key, conn, path = conns.get("http://%s:%d%s" % (address, port, path_and_query), self.wait)
        try:
            conn.request("GET", path, headers={"Authorization": "Bearer " + self.token.decode("utf-8"),
                                               "X-Peer": self.me})
            self.seen.add(peer)  # connected: it has started
            resp = conn.getresponse()
            self.alive[peer] = time.monotonic()
            return key, resp
        except Exception:
            conns.drop(key)
            raise

    def fetch_part(self, conns, file_job, index, buf):
        """Part `index` from its owner into buf, verified; its sha256, or None: read it from the source (owner
        gone, never started, stalled, stopped, or sent bytes that do not match the hash it took of the source's)."""
        owner = self.owner(file_job, index)
        start, end = file_job.parts[index]
        length = end - start
        query = "/part?" + urllib.parse.urlencode({"path": file_job.entry["path"], "index": index})
        what = "part %d of %s from %s" % (index, file_job.entry["key"], owner)
        failures = 0
        while True:
            try:
                key, resp = self.ask(conns, owner, query)
                if resp.status == 409:
                    resp.read()
                    if self.stalled(owner, resp, what):
                        return None
                    continue  # the owner has not got it yet but is moving (it held the request a while): again
                if resp.status != 200:
                    resp.read()
                    return None
                got = 0
                while got < length:
                    count = resp.readinto(buf[got:length])
                    if not count:
                        raise IOError("connection closed early")
                    got += count
                    self.landed(count)
                    self.alive[owner] = time.monotonic()
                expected = self.part_sha(conns, owner, query, what)
                if expected is None:
                    return None
                if hashlib.sha256(buf[:length]).hexdigest() != expected:
                    conns.drop(key)
                    self.count("rejected")
                    self.warn("%s does not match its sha256; reading it from the source" % what)
                    return None
                return expected
            except (IOError, OSError, http.client.HTTPException) as exc:
                failures += 1
                # A peer seen before and now refusing (or silent for `wait`) has stopped or hangs; one never seen
                # may still be starting.
                silent = time.monotonic() - self.alive.get(owner, self.started)
                if owner in self.seen and (failures >= 3 or silent >= self.wait):
                    self.warn("%s: %s gone (%s); reading it from the source" % (what, owner, exc))
                    return None
                if owner not in self.seen and time.monotonic() - self.started > self.wait:
                    self.warn("%s: %s did not start within %g s; reading it from the source"
                              % (what, owner, self.wait))
                    return None
                time.sleep(min(0.05 * failures, 1.0))

    def stalled(self, owner, resp, what):
        """After a 409: True (and said) when the owner's bytes on disk have not moved for `wait` seconds."""
        try:
            value = int(resp.getheader("X-Done") or "-1")
        except ValueError:
            value = -1
        if self.moved(owner, value) < self.wait:
            return False
        self.warn("%s: %s made no progress for %g s; reading it from the source" % (what, owner, self.wait))
        return True

    def part_sha(self, conns, owner, query, what):
        """The part's hash from its owner (it answers once it has all of the part); None if it stopped or
        stalled."""
        while True:
            _, resp = self.ask(conns, owner, query.replace("/part?", "/sha?", 1))
            body = resp.read()
            if resp.status == 200:
                return body.decode("ascii", "replace")
            if resp.status != 409 or self.stalled(owner, resp, what):
                return None

    def peers_done(self, conns):
        """True when no other host can still want a part from this one: each said it is done, is gone, never
        started, or has not moved for `wait` seconds (it then reads from the source what it lacks)."""
        for peer in self.peers:
            if peer == self.me:
                continue
            try:
                _, resp = self.ask(conns, peer, "/done")
                body = resp.read()
                self.seen.add(peer)
                if resp.status == 200 and body != b"1":
                    fields = body.split()
                    value = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else -1
                    if self.moved(peer, value) < self.wait:
                        return False
                    self.warn("%s made no progress for %g s: this host stops serving it its parts"
                              % (peer, self.wait))
            except (IOError, OSError, http.client.HTTPException):
                if peer not in self.seen and time.monotonic() - self.started < self.wait:
                    return False  # not started yet: it may still want this host's share
        return True


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
    swarm = Swarm(job["swarm"]) if job.get("swarm") else None
    peer_workers = int(job["swarm"].get("peer_concurrency", 4)) if swarm else 0
    files = []
    for entry in entries:
        file_job = FileJob(dest, entry, part_size, direct_min)
        if swarm is not None:
            file_job.swarm, file_job.park_limit = swarm, 4
            swarm.files[entry["path"]] = file_job
        file_job.open()
        progress.add(file_job.bytes_kept(), transferred=False)
        files.append(file_job)
    tasks, peer_tasks = queue.Queue(), queue.Queue()
    for task in queue_order(files, int(job.get("spread", concurrency))):
        if swarm is not None and swarm.owner(task[0], task[1]) != swarm.me:
            peer_tasks.put(task)
        else:
            tasks.put(task)
    # A worker holds a part-sized buffer before it takes a part, and parts are taken in order: the part the
    # cursor waits for is always in flight or done, so parked parts (bounded by the pool) never block it.
    # With peers (two queues), parking is bounded by park_limit instead and the pool has room for every worker.
    largest = max([end - start for f in files for start, end in f.parts] or [0])
    pool = BufferPool(round_up(max(1, largest)), concurrency + peer_workers + 4)
    errors = []
    conns = Connections()
    if swarm is not None:
        swarm.progress = progress
        swarm.serve()

    def finish(file_job):
        manifest.record(file_job.entry, file_job.finish())

    # Parts an earlier run left on disk at the start of a file: hash them now (a file may be complete already).
    for file_job in files:
        if file_job.on_disk and file_job.drain(pool) and all(file_job.done):
            finish(file_job)

    def from_source(file_job, index, buf, start, end):
        resume = file_job.resume_offset(index)
        file_job.read_into(buf, start, resume)
        fetch_range(conns, file_job, resume, end, progress, attempts, buf, start,
                    lambda offset, f=file_job, b=buf, s=start: f.hash_landed(b, s, offset),
                    lambda offset, f=file_job, i=index: f.note_written(i, offset))
        if swarm is None:
            file_job.part_done(index)
            return
        swarm.count("source_bytes", end - resume)
        # The hash peers check this part against: of the bytes the source sent (and the resumed ones read back).
        file_job.part_done(index, hashlib.sha256(buf[:end - start]).hexdigest())

    def from_peer(file_job, index, buf, start, end):
        """The part from its owner, written and hashed like a source's; False: it must come from the source."""
        sha = swarm.fetch_part(conns, file_job, index, buf)
        if sha is None:
            swarm.count("fallback_parts")
            return False
        kept = file_job.resume_offset(index) - start  # counted at the start already
        file_job.hash_landed(buf, start, end)
        file_job.write(buf, end - start, start)
        file_job.note_written(index, end)
        progress.add(end - start - kept)
        swarm.count("peer_bytes", end - start)
        file_job.part_done(index, sha)
        return True

    def worker(source):
        while not errors:
            buf = pool.get(errors)
            if buf is None:
                return
            try:
                file_job, index = source.get_nowait()
            except queue.Empty:
                pool.put(buf)
                return
            start, end = file_job.parts[index]
            try:
                if source is tasks or not from_peer(file_job, index, buf, start, end):
                    from_source(file_job, index, buf, start, end)
                if file_job.complete_part(index, buf, pool):
                    finish(file_job)
            except Fatal as exc:
                errors.append(str(exc))
            except OSError as exc:
                errors.append("%s: %s" % (file_job.entry["key"], exc.strerror or exc))

    threads = [threading.Thread(target=worker, args=(tasks,), daemon=True) for _ in range(concurrency)]
    threads += [threading.Thread(target=worker, args=(peer_tasks,), daemon=True) for _ in range(peer_workers)]
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
    # Durable when the fetcher says done, as `sync` after a copy makes it: each file was fsynced before its rename;
    # now the renames themselves (the directories' entries), then the manifest (fsynced, renamed, its directory).
    for directory in sorted({os.path.normpath(os.path.dirname(f.final)) for f in files if f.finished}
                            - {os.path.normpath(dest)}):
        fsync_dir(directory)
    manifest.save(durable=True)
    if swarm is not None:
        serve_until_peers_done(swarm, conns, progress, bool(errors))
    errors = list(dict.fromkeys(errors))  # several parts of one file may fail the same way: say it once
    result = {"transferred_bytes": progress.transferred, "manifest": manifest.doc["files"], "errors": errors}
    if swarm is not None:
        result.update(swarm.counts)
    sys.stdout.write(json.dumps(result) + "\n")
    return 1 if errors else 0


def serve_until_peers_done(swarm, conns, progress, failed):
    """Keep handing out parts until every peer is done with them (or gone); a failed host stops at once."""
    with swarm.cond:
        swarm.finished, swarm.stopped = True, failed
        swarm.cond.notify_all()
    if failed or swarm.server is None:
        return
    while not swarm.peers_done(conns):
        progress.report()
        time.sleep(0.2)  # polling peers' /done: they hold nothing to wait on from here
    swarm.server.shutdown()


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
