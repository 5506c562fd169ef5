#!/usr/bin/env python3
"""deployctl's host-side link of a chained image ship: stdlib only, Python >= 3.7.

Runs on each target as `python3 -c BOOT` (deployctl/image/ship.py): stdin carries this program, then one JSON
line (the job), then, on the chain's first host, the `docker save` stream from the control machine. Any other host
listens on its cluster address for one connection from a host before it, which must open with the ship's random
token (a wrong one is refused, the listener goes on waiting). Every byte that arrives is appended to a spool (an
unlinked temporary file) and nothing else: the next hop's sender and this host's `docker load` each follow the
spool at their own pace, so the chain moves at the network's speed whatever this host's `docker load` does, and
the next host gets the end of the stream as soon as this one has it (not after this host's load). `next` lists
the following hosts in chain order; the first that takes the stream gets it (one that does not answer is skipped).
The control machine's uplink carries one copy.
Prints `docker load`'s output and exits with its code; a broken next hop is said on stderr (`F reason`) and does
not stop the local load. Stderr also carries `T <event> <unix time>` lines (when the stream arrived, its first and
last byte, when the next hop had all of it, when `docker load` had read all of it and when it finished), which
ship.py turns into the per-hop trace.

Other streams ride the same chain (the compile cache, deployctl/execute/compile_cache.py): the job's `sink` names
the local consumer instead of `docker load` (empty: none, this host only passes the stream on), its `source` a
local command whose output is the stream (the chain's head is then a host, and the control machine carries none of
it), and with `counts` the last stderr line says how many bytes arrived and from where (`C bytes peer|controller|
local`)."""

import errno
import hmac
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

CHUNK = 1 << 20
HOP_WAIT = 30  # seconds the next host's listener may take to come up before that host is skipped
RETRY_MAX = 0.1  # longest pause between tries while the next host's listener is not up yet
# The most the spool holds (and puts on the host's disk): how far this host's `docker load` may fall behind the
# stream before the chain waits for it. Larger than most images, so in practice a load never stalls the chain.
SPOOL_BYTES = 8 << 30
GUARD = 64 << 20
# Seconds a hop may move no byte before it is given up (the job's `stall` may set it): an upstream host that stops
# sending breaks this host's stream (it then gets the image from the control machine); a next host that stops
# reading is dropped (it and the hosts after it get it from the control machine after the chain).
STALL = 300


def bound(sock, seconds):
    """Blocking reads and writes on `sock` (sendfile included) that fail after `seconds` with no byte moved."""
    sock.settimeout(None)
    timeval = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    return sock


def stamp(event):
    sys.stderr.write("T %s %.6f\n" % (event, time.time()))
    sys.stderr.flush()


def read_line(sock, limit):
    data = b""
    while not data.endswith(b"\n"):
        got = sock.recv(1)
        if not got or len(data) > limit:
            return None
        data += got
    return data[:-1]


def accept(listen, token, deadline):
    """The first connection that opens with the token (others are answered `refused` and closed)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((listen[0], int(listen[1])))
    server.listen(8)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise IOError("no upstream host connected within the deadline")
            server.settimeout(left)
            conn, _ = server.accept()
            conn.settimeout(60)
            try:
                offered = read_line(conn, 512)
            except OSError:
                offered = None
            if offered is not None and hmac.compare_digest(offered, token):
                conn.sendall(b"ok\n")
                return conn
            try:
                conn.sendall(b"refused\n")
            except OSError:
                pass
            conn.close()
    finally:
        server.close()


def connect(hops, token, deadline):
    """The first of the following hosts that takes the stream: a host whose listener is not up yet (connection
    refused) is tried again for HOP_WAIT seconds; one that answers otherwise, or not at all, is skipped, so the
    hosts after it still get the image from this one. None when none takes it."""
    for address in hops:
        hop_deadline = min(deadline, time.monotonic() + HOP_WAIT)
        delay = 0.01
        while True:
            try:
                sock = socket.create_connection((address[0], int(address[1])), timeout=10)
            except ConnectionRefusedError:
                if time.monotonic() + delay > hop_deadline:
                    break
                time.sleep(delay)  # its listener is not up yet (its SSH session starts late): try again shortly
                delay = min(delay * 2, RETRY_MAX)
                continue
            except OSError:
                break
            try:
                sock.sendall(token + b"\n")
                if read_line(sock, 64) == b"ok":
                    return sock
            except OSError:
                pass
            sock.close()
            break
        sys.stderr.write("F skipped %s:%s: it did not take the stream\n" % (address[0], address[1]))
    return None


class Spool(object):
    """The stream as it arrives, in an unlinked temporary file used as a ring of `capacity` bytes (nothing is left
    on the host, and never more than `capacity` on its disk): one writer appends, `readers` readers each follow
    from the start at their own pace. Unread bytes wait in the page cache or on disk, not in this process; the
    writer waits only when the slowest reader is about a whole `capacity` behind. A write that fails (a full
    disk) counts as a broken stream: this host and the ones after it then get the image from the control
    machine."""

    def __init__(self, directory, capacity, readers):
        self.file = tempfile.TemporaryFile(dir=directory, prefix="deployctl-image-")
        self.fd = self.file.fileno()
        self.capacity = capacity
        # sendfile() hands the spool's pages to the socket or pipe by reference: they must not be written over
        # while queued there. With a ring of at least 4 GUARDs, the writer stays GUARD (far more than any socket
        # or pipe buffer) behind the slowest reader; a smaller ring copies instead.
        self.guard = GUARD if capacity >= 4 * GUARD else 0
        self.offsets = [0] * readers  # where each reader is; None once it has stopped
        self.size = 0
        self.ended = False
        self.aborted = False
        self.cond = threading.Condition()

    def _slowest(self):
        live = [o for o in self.offsets if o is not None]
        return min(live) if live else self.size

    def append(self, data):
        view = memoryview(data)
        while view:
            with self.cond:
                while self.size - self._slowest() >= self.capacity - self.guard:
                    self.cond.wait()  # the ring is full: wait for the slowest reader
                room = self.capacity - self.guard - (self.size - self._slowest())
                position = self.size % self.capacity
                count = min(len(view), room, self.capacity - position)
            done = 0
            while done < count:
                done += os.pwrite(self.fd, view[done:count], position + done)
            with self.cond:
                self.size += count
                self.cond.notify_all()
            view = view[count:]

    def end(self, aborted=False):
        """No more bytes; with `aborted`, the stream broke and readers raise instead of ending cleanly."""
        with self.cond:
            self.ended, self.aborted = True, aborted
            self.cond.notify_all()

    def follow(self, reader, out):
        """Copy the whole stream, in order, as it arrives, into file descriptor `out` (a socket or a pipe); returns
        at its end (IOError if the stream broke). The kernel copies from the spool's pages (sendfile), so the bytes
        never pass through this process. A reader that stops, either way, no longer holds the writer back."""
        copy = self._sendfile if self.guard else self._copy
        try:
            while True:
                with self.cond:
                    offset = self.offsets[reader]
                    while offset >= self.size and not self.ended:
                        self.cond.wait()
                    size, ended, aborted = self.size, self.ended, self.aborted
                if offset >= size and ended:
                    if aborted:
                        raise IOError("the stream broke upstream")
                    return
                position = offset % self.capacity
                count = min(CHUNK, size - offset, self.capacity - position)
                try:
                    sent = copy(out, position, count)
                except OSError as exc:
                    if copy is not self._sendfile or exc.errno not in (errno.EINVAL, errno.ENOSYS):
                        raise
                    copy = self._copy  # this kernel cannot sendfile into `out`
                    sent = copy(out, position, count)
                if sent <= 0:
                    raise IOError("the spool is shorter than written")
                with self.cond:
                    self.offsets[reader] = offset + sent
                    self.cond.notify_all()
        finally:
            self.retire(reader)

    def _sendfile(self, out, position, count):
        return os.sendfile(out, self.fd, position, count)

    def _copy(self, out, position, count):
        data = os.pread(self.fd, count, position)
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        return len(data)

    def retire(self, reader):
        """This reader reads no more (done, failed, or the next hop that never connected)."""
        with self.cond:
            self.offsets[reader] = None
            self.cond.notify_all()

    def close(self):
        self.file.close()


def spool_dir(wanted):
    """Where the spool goes: the job's directory, else /var/tmp (on disk, where /tmp may be a small tmpfs)."""
    for directory in (wanted, "/var/tmp", tempfile.gettempdir()):
        if directory and os.path.isdir(directory) and os.access(directory, os.W_OK):
            return directory
    return None


def send_on(spool, reader, following, token, deadline, failed, stall=STALL):
    """The next hop's side: connect (while the stream starts arriving into the spool), then follow it. If the
    stream broke upstream, the connection is reset rather than closed, so the next host sees a broken stream."""
    nxt = connect(following, token, deadline)
    if nxt is None:
        failed["unreached"] = "no following host took the stream"
        spool.retire(reader)
        return
    bound(nxt, stall)
    stamp("next_connected")
    try:
        spool.follow(reader, nxt.fileno())
        nxt.shutdown(socket.SHUT_WR)  # the end of the stream for the next host, whatever this host's load does
        stamp("next_done")
    except (IOError, OSError) as exc:
        failed["next"] = ("it took no byte for %g s" % stall if isinstance(exc, BlockingIOError) else str(exc))
        try:
            nxt.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    finally:
        nxt.close()


def feed_load(spool, reader, load, failed):
    """This host's `docker load`: follow the spool into its stdin, then close it (kill it if the stream broke)."""
    try:
        spool.follow(reader, load.stdin.fileno())
        load.stdin.close()
        stamp("load_fed")
    except (IOError, OSError) as exc:
        failed["load"] = str(exc)
        load.kill()
        try:
            load.stdin.close()
        except OSError:
            pass


def main():
    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline().decode("utf-8"))
    token = job["token"].encode("utf-8")
    deadline = time.monotonic() + float(job.get("wait", 120))
    stall = float(job.get("stall", STALL))
    stamp("start")
    directory = spool_dir(job.get("spool"))
    if directory is None:
        sys.stderr.write("F no writable directory for the spool\n")
        return 1
    following = job.get("next") or []
    sink = job.get("sink", ["docker", "load"])
    readers = (1 if sink else 0) + (1 if following else 0)
    if not readers:
        sys.stderr.write("F nothing to do: no local sink and no following host\n")
        return 1
    spool = Spool(directory, int(job.get("spool_bytes", SPOOL_BYTES)), readers)
    failed = {}
    try:
        upstream = bound(accept(job["listen"], token, deadline), stall) if job.get("listen") else None
    except (IOError, OSError) as exc:
        sys.stderr.write("F no image stream arrived: %s\n" % exc)
        return 1
    stamp("upstream")
    # Only a host that has the stream takes the next one's single connection: one that never gets it must not,
    # so the host before it can skip it and hand the stream to the next one itself.
    sender = None
    if following:
        sender = threading.Thread(target=send_on, args=(spool, readers - 1, following, token, deadline, failed, stall))
        sender.daemon = True
        sender.start()
    load = loader = None
    if sink:
        load = subprocess.Popen(sink, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                bufsize=0)
        loader = threading.Thread(target=feed_load, args=(spool, 0, load, failed))
        loader.daemon = True
        loader.start()
    producer = subprocess.Popen(job["source"], stdout=subprocess.PIPE) if job.get("source") else None
    received = 0
    buffer = bytearray(CHUNK)  # one buffer for every read: no fresh megabyte per chunk
    view = memoryview(buffer)
    if upstream is not None:
        source = upstream.recv_into
    else:
        source = (producer.stdout if producer is not None else stdin).readinto1
    try:
        while True:
            count = source(view)
            if not count:
                break
            if not received:
                stamp("first_byte")
            received += count
            spool.append(view[:count])
    except BlockingIOError:
        failed["upstream"] = "the host before this one sent no byte for %g s" % stall
    except (IOError, OSError) as exc:
        failed["upstream"] = str(exc)
    if producer is not None and producer.wait() != 0:
        failed["upstream"] = "%s exited with %d" % (job["source"][0], producer.returncode)
    stamp("last_byte")
    spool.end(aborted="upstream" in failed)
    if upstream is not None:
        upstream.close()
    output, code = b"", 0
    if load is not None:
        output = load.stdout.read()  # read while the load runs, so a chatty load never blocks on a full pipe
        code = load.wait()
        stamp("load_done")
        loader.join()
    if sender is not None:
        sender.join()
    spool.close()
    sys.stdout.buffer.write(output)
    sys.stdout.flush()
    if "upstream" in failed:
        sys.stderr.write("F the stream broke after %d bytes: %s\n" % (received, failed["upstream"]))
        return code or 1
    if "load" in failed:
        sys.stderr.write("F docker load stopped reading: %s\n" % failed["load"])
    if "next" in failed:
        sys.stderr.write("F the next host did not get the image: %s\n" % failed["next"])
    if load is None and (sender is None or "next" in failed or "unreached" in failed):
        code = code or 1  # this host's only work was to pass the stream on
    if job.get("counts"):
        came = "peer" if upstream is not None else ("local" if producer is not None else "controller")
        sys.stderr.write("C %d %s\n" % (received, came))
    return code

if __name__ == "__main__":
    sys.exit(main())
