#!/usr/bin/env python3
"""deployctl's host-side link of a chained image ship: stdlib only, Python >= 3.7.

Runs on each target as `python3 -c BOOT` (deployctl/image/chain.py): stdin carries this program, then one JSON
line (the job), then, on the chain's first host, the `docker save` stream from the control machine. Any other host
listens on its cluster address for one connection from a host before it, which must open with the ship's random
token (a wrong one is refused, the listener goes on waiting). Every byte that arrives goes into this host's
`docker load` and, at the same time, on to the first following host that takes it (`next` lists them in chain
order; one that does not answer is skipped). The control machine's uplink carries one copy.
Prints `docker load`'s output and exits with its code; a broken next hop is said on stderr (`F reason`) and does
not stop the local load.

Other streams ride the same chain (the compile cache, deployctl/execute/compile_cache.py): the job's `sink` names
the local consumer instead of `docker load` (empty: none, this host only passes the stream on), its `source` a
local command whose output is the stream (the chain's head is then a host, and the control machine carries none of
it), and with `counts` the last stderr line says how many bytes arrived and from where (`C bytes peer|controller|
local`)."""

import hmac
import json
import queue
import socket
import subprocess
import sys
import threading
import time

CHUNK = 1 << 20
DEPTH = 64  # chunks (MiB) a slow consumer may fall behind before the reader waits for it
HOP_WAIT = 30  # seconds the next host's listener may take to come up before that host is skipped


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
                conn.settimeout(None)
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
        delay = 0.05
        while True:
            try:
                sock = socket.create_connection((address[0], int(address[1])), timeout=10)
            except ConnectionRefusedError:
                if time.monotonic() + delay > hop_deadline:
                    break
                time.sleep(delay)  # its listener is not up yet: try again shortly
                delay = min(delay * 2, 1.0)
                continue
            except OSError:
                break
            try:
                sock.sendall(token + b"\n")
                if read_line(sock, 64) == b"ok":
                    sock.settimeout(None)
                    return sock
            except OSError:
                pass
            sock.close()
            break
        sys.stderr.write("F skipped %s:%s: it did not take the stream\n" % (address[0], address[1]))
    return None


def pump(out, sink, failed, name):
    """Write what arrives on queue `out` with `sink(data)` until None; on failure note it and drop the rest."""
    while True:
        data = out.get()
        if data is None:
            return
        if failed.get(name):
            continue
        try:
            sink(data)
        except (IOError, OSError) as exc:
            failed[name] = str(exc)


def main():
    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline().decode("utf-8"))
    token = job["token"].encode("utf-8")
    deadline = time.monotonic() + float(job.get("wait", 120))
    try:
        upstream = accept(job["listen"], token, deadline) if job.get("listen") else None
    except (IOError, OSError) as exc:
        sys.stderr.write("F no image stream arrived: %s\n" % exc)
        return 1
    source = subprocess.Popen(job["source"], stdout=subprocess.PIPE) if job.get("source") else None
    sink = job.get("sink", ["docker", "load"])
    load = subprocess.Popen(sink, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT) if sink else None
    failed = {}
    # The stream goes on to the first of the following hosts that takes it; that one serves the ones after it.
    following = job.get("next") or []
    nxt = connect(following, token, deadline) if following else None
    queues, sinks = {}, {}
    if load is not None:
        queues["load"] = queue.Queue(DEPTH)
        sinks["load"] = lambda data: (load.stdin.write(data), load.stdin.flush())
    if nxt is not None:
        queues["next"] = queue.Queue(DEPTH)
        sinks["next"] = nxt.sendall
    threads = [threading.Thread(target=pump, args=(queues[n], sinks[n], failed, n), daemon=True) for n in queues]
    for thread in threads:
        thread.start()
    received = 0
    while True:
        if upstream is not None:
            data = upstream.recv(CHUNK)
        else:
            data = (source.stdout if source is not None else stdin).read1(CHUNK)
        if not data:
            break
        received += len(data)
        for name in queues:
            queues[name].put(data)
    for name in queues:
        queues[name].put(None)
    for thread in threads:
        thread.join()
    output, code = b"", 0
    if load is not None:
        try:
            load.stdin.close()
        except OSError:
            pass
        output = load.stdout.read()
        code = load.wait()
    if source is not None and source.wait() != 0:
        sys.stderr.write("F %s exited with %d\n" % (job["source"][0], source.returncode))
        code = code or source.returncode
    if upstream is not None:
        upstream.close()
    if nxt is not None:
        try:
            nxt.shutdown(socket.SHUT_WR)  # the end of the stream for the next host
        except OSError:
            pass
        nxt.close()
    sys.stdout.buffer.write(output)
    sys.stdout.flush()
    if "next" in failed:
        sys.stderr.write("F the next host did not get the image: %s\n" % failed["next"])
    if load is None and (nxt is None or "next" in failed):
        code = code or 1  # this host's only work was to pass the stream on
    if job.get("counts"):
        came = "peer" if upstream is not None else ("local" if source is not None else "controller")
        sys.stderr.write("C %d %s\n" % (received, came))
    return code


if __name__ == "__main__":
    sys.exit(main())
