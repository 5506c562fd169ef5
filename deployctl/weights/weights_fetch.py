#!/usr/bin/env python3
"""deployctl's host-side weights fetcher: stdlib only, Python >= 3.7 (DevServers have 3.9).

Reads one job (JSON on stdin: pre-signed URLs, sizes, ETags, dest), downloads what is missing in parallel ranged
parts into `<file>.deployctl-partial`, hashes it, renames it when complete and verified, and keeps the manifest
`<dest>/.deployctl-manifest.json`. Progress goes to stderr (`P done total`), the result to stdout (one JSON line).
A URL is a bearer token: it is never printed, only the object's key.
"""

import hashlib
import http.client
import json
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
CHUNK = 1 << 20
STATE_EVERY = 1 << 20  # save a file's resume state after each MiB written (at most 4 times a second)
HASH_CHUNK = 8 << 20


class Fatal(Exception):
    """A failure no retry fixes; the message names the key, never the URL."""


class Progress(object):
    def __init__(self, total):
        self.total, self.done, self.transferred = total, 0, 0
        self.lock = threading.Lock()
        self.stop_after = None

    def add(self, count, transferred=True):
        with self.lock:
            self.done += count
            if transferred:
                self.transferred += count
            if self.stop_after is not None and self.transferred >= self.stop_after:
                # Test knob: an abrupt stop, like a killed process (no clean-up at all).
                os._exit(75)

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


def s3_code(body):
    match = re.search(rb"<Code>([^<]{1,64})</Code>", body or b"")
    return match.group(1).decode("ascii", "replace") if match else ""


def fetch_range(conns, entry, start, end, fd, progress, attempts, on_written=None, on_data=None):
    """GET bytes [start, end) of one object into fd at the same offset, retrying throttling, 5xx and resets;
    `on_data(bytes)` then `on_written(offset)` after each chunk on disk (hash, resume state)."""
    offset = start
    delay = 0.2
    for attempt in range(attempts):
        key, conn, path = conns.get(entry["url"])
        try:
            headers = {"Range": "bytes=%d-%d" % (offset, end - 1)} if end > offset else {}
            if end == offset:
                return
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            if resp.status in RETRY_STATUS:
                resp.read()
                raise IOError("HTTP %d" % resp.status)
            if resp.status not in (200, 206):
                code = s3_code(resp.read())
                raise Fatal("%s: HTTP %d %s" % (entry["key"], resp.status, code))
            if resp.status == 200 and offset != 0:
                raise Fatal("%s: the server ignored the byte range" % entry["key"])
            buf = bytearray(CHUNK)
            view = memoryview(buf)
            while offset < end:
                got = resp.readinto(view[:min(CHUNK, end - offset)])
                if not got:
                    raise IOError("connection closed early")
                os.pwrite(fd, view[:got], offset)
                if on_data is not None:
                    on_data(view[:got])
                offset += got
                if on_written is not None:
                    on_written(offset)
                progress.add(got)
            if resp.length:  # more than asked for: drain so the connection stays usable
                resp.read()
            return
        except Fatal:
            raise
        except (IOError, OSError, http.client.HTTPException) as exc:
            conns.drop(key)
            if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
                raise Fatal("%s: no space left on device" % entry["key"])
            if attempt == attempts - 1:
                raise Fatal("%s: gave up after %d attempts (last: %s)" % (entry["key"], attempts, exc))
            time.sleep(delay + random.random() * delay)
            delay = min(delay * 2, 5.0)


class FileJob(object):
    """One object being written: its parts, which are done, and the hash that follows the done prefix."""

    def __init__(self, dest, entry, part_size):
        self.entry = entry
        self.final = os.path.join(dest, entry["path"])
        self.partial = self.final + PARTIAL
        self.state_path = self.partial + ".json"
        size = entry["size"]
        self.parts = [(s, min(s + part_size, size)) for s in range(0, size, part_size)] or [(0, 0)]
        self.done = [False] * len(self.parts)
        self.written = [0] * len(self.parts)  # bytes on disk from each part's start (resume point)
        self.saved_at, self.saved_time = 0, 0.0  # bytes written, and when, at the last save of the state
        self.hashed_to = 0  # the sha256 (and MD5) cover bytes [0, hashed_to)
        self.hashed_part = 0  # parts before this one are done (a cursor for contiguous())
        self.sha = hashlib.sha256()
        self.md5 = hashlib.md5() if want_md5(entry) else None
        self.state_lock = threading.Lock()  # done/written and the state file: never waits on hashing
        self.fd = None

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
        self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o644)
        for index in previous:
            if 0 <= index < len(self.done):
                self.done[index] = True
                self.written[index] = self.parts[index][1] - self.parts[index][0]
        self.write_state()
        self.saved_time = 0.0  # the first MiB of new data is saved at once
        return [i for i, d in enumerate(self.done) if d]

    def resume_offset(self, index):
        """Where fetching part `index` starts again: after the bytes already on disk."""
        return self.parts[index][0] + self.written[index]

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

    def contiguous(self):
        """Bytes on disk from offset 0 without a gap: what can be hashed now."""
        index = self.hashed_part
        while index < len(self.parts) and self.done[index]:
            index += 1
        self.hashed_part = index  # done parts stay done: later calls start here
        if index == len(self.parts):
            return self.entry["size"]
        return self.parts[index][0] + self.written[index]

    def hash_bytes(self, data):
        self.sha.update(data)
        if self.md5 is not None:
            self.md5.update(data)

    def hash_from_disk(self, upto, view):
        """Hash [hashed_to, upto) read back from the file (the page cache) through a reused buffer."""
        while self.hashed_to < upto:
            got = os.preadv(self.fd, [view[:min(len(view), upto - self.hashed_to)]], self.hashed_to)
            if not got:
                raise Fatal("%s: short partial file" % self.entry["key"])
            self.hash_bytes(view[:got])
            self.hashed_to += got

    def hash_received(self, data):
        """Inline hash of a one-part file's bytes as they arrive (no read-back)."""
        self.hash_bytes(data)
        self.hashed_to += len(data)

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
    """`<dest>/.deployctl-manifest.json`, rewritten atomically at most once a second and at the end."""

    def __init__(self, dest, source):
        self.path = os.path.join(dest, MANIFEST)
        self.lock = threading.Lock()
        self.written = 0.0
        try:
            with open(self.path) as handle:
                self.doc = json.load(handle)
        except (OSError, ValueError):
            self.doc = {}
        self.doc = {"version": 1, "source": source, "files": self.doc.get("files", {})}

    def record(self, entry, sha):
        with self.lock:
            self.doc["files"][entry["path"]] = {"key": entry["key"], "size": entry["size"],
                                                "etag": entry["etag"], "sha256": sha}
            if time.monotonic() - self.written > 1.0:
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


def run(job):
    dest = job["dest"]
    os.makedirs(dest, exist_ok=True)
    manifest = Manifest(dest, job.get("source", ""))
    for path in job.get("remove", []):
        # Only files this program wrote (they are in the manifest) and that left the source.
        if path in manifest.doc["files"]:
            try:
                os.unlink(os.path.join(dest, path))
            except OSError:
                pass
            manifest.forget(path)
    part_size = int(job.get("part_size", 32 << 20))
    entries = job.get("files", [])
    progress = Progress(sum(e["size"] for e in entries))
    progress.stop_after = job.get("stop_after_bytes")
    tasks = queue.Queue()
    files = []
    for entry in entries:
        file_job = FileJob(dest, entry, part_size)
        already = file_job.open()
        files.append(file_job)
        for index in already:
            start, end = file_job.parts[index]
            progress.add(end - start, transferred=False)
        for index, done in enumerate(file_job.done):
            if not done:
                progress.add(file_job.written[index], transferred=False)
                tasks.put((file_job, index))
    errors = []
    # Files whose parts were all done before (killed between last part and rename): finish them first.
    for file_job in files:
        if all(file_job.done):
            file_job.hash_from_disk(file_job.entry["size"], memoryview(bytearray(HASH_CHUNK)))
            manifest.record(file_job.entry, file_job.finish())
    conns = Connections()
    attempts = int(job.get("attempts", 8))
    # Multi-part files are hashed by one hasher thread that follows each file's contiguous prefix while the
    # workers keep fetching; a one-part file is hashed by its worker from the received bytes.
    hashed = [f for f in files if len(f.parts) > 1 and not all(f.done)]
    wake = threading.Condition()  # a worker wrote bytes the hasher may be waiting for
    to_finish = queue.Queue()  # hashed multi-part files to verify and rename (None: no more)
    workers_gone = threading.Event()

    def fetched(file_job, index, offset):
        file_job.note_written(index, offset)
        with wake:
            wake.notify()

    def worker():
        while not errors:
            try:
                file_job, index = tasks.get_nowait()
            except queue.Empty:
                return
            end = file_job.parts[index][1]
            one_part = len(file_job.parts) == 1
            try:
                if one_part and file_job.resume_offset(index):
                    file_job.hash_from_disk(file_job.resume_offset(index), memoryview(bytearray(HASH_CHUNK)))
                fetch_range(conns, file_job.entry, file_job.resume_offset(index), end, file_job.fd, progress,
                            attempts, lambda offset, f=file_job, i=index: fetched(f, i, offset),
                            file_job.hash_received if one_part else None)
                file_job.part_done(index)
                if one_part:
                    manifest.record(file_job.entry, file_job.finish())
                else:
                    with wake:
                        wake.notify()
            except Fatal as exc:
                errors.append(str(exc))
            except OSError as exc:
                errors.append("%s: %s" % (file_job.entry["key"], exc.strerror or exc))

    def hasher():
        view = memoryview(bytearray(HASH_CHUNK))
        try:
            for file_job in hashed:
                size = file_job.entry["size"]
                while file_job.hashed_to < size:
                    with wake:
                        upto = file_job.contiguous()
                        while upto <= file_job.hashed_to and not errors:
                            if workers_gone.is_set():
                                raise Fatal("%s: parts missing after all fetches ended" % file_job.entry["key"])
                            wake.wait(0.5)
                            upto = file_job.contiguous()
                    if errors:
                        return
                    file_job.hash_from_disk(upto, view)
                to_finish.put(file_job)
        except Fatal as exc:
            errors.append(str(exc))
        except OSError as exc:
            errors.append("hashing: %s" % (exc.strerror or exc))
        finally:
            to_finish.put(None)

    def finisher():
        # Verify + fsync + rename off the hasher's thread: the fsync waits for the disk, the hasher need not.
        while True:
            file_job = to_finish.get()
            if file_job is None:
                return
            try:
                manifest.record(file_job.entry, file_job.finish())
            except Fatal as exc:
                errors.append(str(exc))
            except OSError as exc:
                errors.append("%s: %s" % (file_job.entry["key"], exc.strerror or exc))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(int(job.get("concurrency", 16)))]
    helpers = [threading.Thread(target=hasher, daemon=True), threading.Thread(target=finisher, daemon=True)]
    for thread in threads + helpers:
        thread.start()
    while any(t.is_alive() for t in threads + helpers):
        progress.report()
        if not any(t.is_alive() for t in threads):
            workers_gone.set()
            with wake:
                wake.notify()
        for thread in threads + helpers:
            if thread.is_alive():
                thread.join(0.5)
                break
    progress.report()
    manifest.save()
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
