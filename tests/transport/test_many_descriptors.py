"""The transports keep working when the process holds more than 1024 descriptors (a bench's load generator beside
the telemetry's SSH commands): select() refuses any descriptor past 1024, a selector does not."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time

import pytest

from deployctl.transport.ssh import _drain
from deployctl.transport.tcp import await_banner, tcp_connect

SELECT_LIMIT = 1024  # FD_SETSIZE


@pytest.fixture
def past_select_limit():
    """Hold descriptors until every new one is numbered past 1024 (the soft limit raised for the test)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = SELECT_LIMIT + 512
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} leaves no room past {SELECT_LIMIT} descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)  # always the lowest free number: gaps fill first
            held.append(fd)
            if fd > SELECT_LIMIT:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connect_and_banner_wait_work_past_1024_descriptors(past_select_limit):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        deadline = time.monotonic() + 30
        sock = tcp_connect("127.0.0.1", port, deadline, 30, threading.Event())
        try:
            assert sock.fileno() > SELECT_LIMIT
            peer, _ = server.accept()
            with peer:
                peer.sendall(b"SSH-2.0-test\r\n")
                await_banner(sock, "127.0.0.1:%d" % port, deadline, 30, threading.Event())
                assert sock.recv(64) == b"SSH-2.0-test\r\n"  # the banner was peeked at, not taken
        finally:
            sock.close()


class PipeChannel:
    """What _drain uses of a paramiko Channel, over a pipe: the remote command writes its output (and exits) the
    first time the exit status is asked for, so the first pass finds nothing and _drain has to wait on fileno()."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.buffer, self.eof_received, self.closed, self.asked = b"", False, False, 0

    def fileno(self) -> int:
        return self.read_fd

    def _pull(self) -> None:
        try:
            data = os.read(self.read_fd, 65536)
        except BlockingIOError:
            return
        self.buffer += data
        self.eof_received = self.eof_received or not data

    def recv_ready(self) -> bool:
        self._pull()
        return bool(self.buffer)

    def recv(self, size: int) -> bytes:
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        self.asked += 1
        if self.asked == 1:  # the command answers now: _drain's next step is to wait for the descriptor
            os.write(self.write_fd, b"hello\n")
            os.close(self.write_fd)
            return False
        return self.eof_received

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        os.close(self.read_fd)


def test_an_ssh_command_is_drained_past_1024_descriptors(past_select_limit):
    channel = PipeChannel()
    try:
        assert channel.fileno() > SELECT_LIMIT
        assert _drain(channel, timeout=30) == (b"hello\n", b"")
        assert channel.asked >= 2 and not channel.closed
    finally:
        channel.release()
