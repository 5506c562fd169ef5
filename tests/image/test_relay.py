"""The host side of a chained image ship (deployctl/image/image_relay.py), run as `python3 -c BOOT` as the hosts
run it, on loopback ports, with a stand-in `docker` that keeps what `docker load` reads."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deployctl.image.ship import BOOT, _job, relay_program, relay_stdin


def _relay_stdin(token, listen, following):
    return relay_stdin(_job(token, listen, following))


RELAY = Path(__file__).resolve().parents[2] / "deployctl" / "image" / "image_relay.py"
TOKEN = "ship-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fake_docker(tmp_path: Path, name: str) -> dict:
    """An environment whose `docker load` copies its stdin to <tmp>/<name>.tar."""
    bin_dir = tmp_path / f"bin-{name}"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(f"#!/bin/sh\ncat > {tmp_path / (name + '.tar')}\necho Loaded image: test:1\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_relay_left_behind():
    """A failed test must not leave relays (or their `docker load`s) running."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the relay and its `docker load` (its own session)
        except ProcessLookupError:
            pass
        proc.wait()


def _start(tmp_path: Path, name: str, stdin: bytes, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env or _fake_docker(tmp_path, name), start_new_session=True)
    _STARTED.append(proc)
    proc.stdin.write(stdin)
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it
    return proc


def _connect(port: int, proc: subprocess.Popen) -> socket.socket:
    """A connection to a relay's listener, once it is up (poll with a deadline)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)


def test_a_chain_of_three_loads_the_same_bytes_everywhere_and_refuses_a_wrong_token(tmp_path):
    data = os.urandom(5 * (1 << 20) + 77)
    ports = [_free_port() for _ in range(3)]
    hops = [["127.0.0.1", port] for port in ports]
    tail = _start(tmp_path, "t3", _relay_stdin(TOKEN, hops[2], []))
    middle = _start(tmp_path, "t2", _relay_stdin(TOKEN, hops[1], hops[2:]))
    # A wrong token is answered `refused` and the relay goes on waiting for the right one.
    with _connect(ports[1], middle) as sock:
        sock.sendall(b"not-the-token\n")
        assert sock.recv(64) == b"refused\n"
    head = _start(tmp_path, "t1", _relay_stdin(TOKEN, None, hops[1:]) + data)
    for proc in (head, middle, tail):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert b"Loaded image: test:1" in out
    for name in ("t1", "t2", "t3"):
        assert (tmp_path / f"{name}.tar").read_bytes() == data


def test_a_relay_with_no_upstream_gives_up_after_its_wait_and_says_why(tmp_path):
    stdin = _relay_stdin(TOKEN, ["127.0.0.1", _free_port()], []).replace(b'"wait": 120', b'"wait": 0.2')
    proc = _start(tmp_path, "lonely", stdin)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and b"F no image stream arrived" in err
    assert not (tmp_path / "lonely.tar").exists()


def test_the_relay_is_python_37_and_stdlib_only():
    tree = ast.parse(RELAY.read_text(), feature_version=(3, 7))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names)
    assert relay_program() == RELAY.read_bytes()


def test_a_host_that_does_not_take_the_stream_is_skipped_and_the_next_one_still_gets_it(tmp_path):
    """Something else listens on the second host's port (it takes the connection and closes it): the first host
    passes the stream on to the third one instead."""
    data = os.urandom(3 * (1 << 20))
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(4)
    port = _free_port()
    hops = [["127.0.0.1", squatter.getsockname()[1]], ["127.0.0.1", port]]
    tail = _start(tmp_path, "t3", _relay_stdin(TOKEN, hops[1], []))

    def squat():
        conn, _ = squatter.accept()
        conn.close()

    threading.Thread(target=squat, daemon=True).start()
    head = _start(tmp_path, "t1", _relay_stdin(TOKEN, None, hops) + data)
    errors = {}
    for name, proc in (("t1", head), ("t3", tail)):
        out, errors[name] = proc.communicate(timeout=60)
        assert proc.returncode == 0, errors[name]
    squatter.close()
    assert b"F skipped 127.0.0.1:%d" % hops[0][1] in errors["t1"]
    for name in ("t1", "t3"):
        assert (tmp_path / f"{name}.tar").read_bytes() == data


def _held_docker(tmp_path: Path, name: str, release: Path) -> dict:
    """An environment whose `docker load` reads nothing until `release` exists, then copies its stdin."""
    bin_dir = tmp_path / f"bin-{name}"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(f"#!/bin/sh\nwhile [ ! -e {release} ]; do sleep 0.02; done\n"
                      f"cat > {tmp_path / (name + '.tar')}\necho Loaded image: test:1\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_load_that_does_not_read_never_holds_back_the_hosts_after_it(tmp_path):
    """The head's `docker load` reads nothing until released: the next host still gets the whole stream and its
    end, and finishes, while the head is waiting; the head's load then gets every byte from the spool."""
    data = os.urandom(24 * (1 << 20))  # far more than pipes and socket buffers hold
    release = tmp_path / "release"
    port = _free_port()
    tail = _start(tmp_path, "t2", _relay_stdin(TOKEN, ["127.0.0.1", port], []))
    head = subprocess.Popen([sys.executable, "-c", BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_held_docker(tmp_path, "t1", release), start_new_session=True)
    _STARTED.append(head)
    stdin, head.stdin = head.stdin, None  # fed by a thread; communicate() must leave it alone
    feeder = threading.Thread(target=lambda: (stdin.write(_relay_stdin(TOKEN, None, [["127.0.0.1", port]]) + data),
                                              stdin.close()), daemon=True)
    feeder.start()
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    assert head.poll() is None and not (tmp_path / "t1.tar").exists()  # the head's load is still held
    assert (tmp_path / "t2.tar").read_bytes() == data
    release.touch()
    out, err = head.communicate(timeout=60)
    assert head.returncode == 0, err
    assert (tmp_path / "t1.tar").read_bytes() == data
    events = [line.split()[1] for line in err.decode().splitlines() if line.startswith("T ")]
    assert events.index("next_done") < events.index("load_fed") < events.index("load_done")
    assert {"start", "first_byte", "last_byte", "next_connected"} <= set(events)


def test_a_spool_smaller_than_the_image_wraps_around_and_loses_nothing(tmp_path):
    data = os.urandom(3 * (1 << 20) + 12345)
    port = _free_port()
    small = b'"wait": 120, "spool_bytes": 65536'
    tail = _start(tmp_path, "t2", _relay_stdin(TOKEN, ["127.0.0.1", port], []).replace(b'"wait": 120', small))
    head = _start(tmp_path, "t1", _relay_stdin(TOKEN, None, [["127.0.0.1", port]]).replace(b'"wait": 120', small)
                  + data)
    for proc in (head, tail):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    for name in ("t1", "t2"):
        assert (tmp_path / f"{name}.tar").read_bytes() == data


def test_a_stream_that_breaks_upstream_fails_the_next_host_too(tmp_path):
    """The head's upstream ends with a reset instead of a clean end: the head fails, and so does the next host
    (whose upstream is reset in turn), instead of loading a truncated archive as if it were whole."""
    port, head_port = _free_port(), _free_port()
    tail = _start(tmp_path, "t2", _relay_stdin(TOKEN, ["127.0.0.1", port], []))
    head = _start(tmp_path, "t1", _relay_stdin(TOKEN, ["127.0.0.1", head_port], [["127.0.0.1", port]]))
    sock = _connect(head_port, head)
    sock.sendall(TOKEN.encode() + b"\n")
    assert sock.recv(3) == b"ok\n"
    sock.sendall(os.urandom(1 << 20))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # close = reset
    sock.close()
    for proc in (head, tail):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and b"F the stream broke" in err, err


def _stalling_stdin(listen, following, stall: float) -> bytes:
    return relay_stdin({**_job(TOKEN, listen, following), "stall": stall})


def test_an_upstream_that_stops_sending_breaks_the_stream_within_its_bound(tmp_path):
    """Issue 39: the host before this one connected, sent part of the image and then nothing, its connection open
    (a frozen host): the relay waited for ever. Now no byte for `stall` seconds breaks the stream, said."""
    port = _free_port()
    relay = _start(tmp_path, "t2", _stalling_stdin(["127.0.0.1", port], [], 1))
    sock = _connect(port, relay)
    try:
        sock.sendall(TOKEN.encode() + b"\n")
        assert sock.recv(3) == b"ok\n"
        sock.sendall(os.urandom(1 << 20))
        out, err = relay.communicate(timeout=30)  # a hang guard far above the bound
        assert relay.returncode != 0 and b"F the stream broke" in err and b"sent no byte for 1 s" in err, err
    finally:
        sock.close()


def test_a_next_host_that_stops_reading_is_dropped_within_its_bound(tmp_path):
    """The next host took the stream and then read nothing (frozen): this host's own load completes, the next one
    is reported as not served (the control machine sends it the image after the chain), and the relay ends."""
    port = _free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    data = os.urandom(64 << 20)  # far more than the socket buffers hold: the sender must block on the next host
    head = _start(tmp_path, "t1", _stalling_stdin(None, [["127.0.0.1", port]], 1) + data)
    conn, _ = listener.accept()
    try:
        conn.settimeout(30)
        assert conn.recv(len(TOKEN) + 1) == TOKEN.encode() + b"\n"
        conn.sendall(b"ok\n")  # and then it reads nothing more
        out, err = head.communicate(timeout=60)  # a hang guard far above the bound
        assert b"F the next host did not get the image: it took no byte for 1 s" in err, err
        assert (tmp_path / "t1.tar").read_bytes() == data
    finally:
        conn.close()
        listener.close()
