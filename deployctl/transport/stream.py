"""A running command's byte streams, for what is too big to hold: `docker save` read chunk by chunk on one host
and written into `docker load` on others (image shipping). One interface, an SSH and a local implementation."""

from __future__ import annotations

import subprocess
import threading
from typing import Protocol


class Stream(Protocol):
    def read(self, size: int) -> bytes:
        """Up to `size` bytes of stdout; b"" once the command closed it."""

    def write(self, data: bytes) -> None:
        """All of `data` to stdin; OSError when the command is gone."""

    def finish(self) -> tuple[int, bytes, bytes]:
        """Close stdin, wait for the end: (exit code, the rest of stdout, all of stderr)."""

    def close(self) -> None:
        """Let go of the command (whatever state it is in)."""


class ChannelStream:
    """A command on an SSH channel (paramiko): stderr is collected as it comes, so it can never block stdout."""

    def __init__(self, channel, drain) -> None:
        self.channel, self.drain, self.err = channel, drain, bytearray()

    def read(self, size: int) -> bytes:
        while self.channel.recv_stderr_ready():
            self.err += self.channel.recv_stderr(size)
        return self.channel.recv(size)

    def write(self, data: bytes) -> None:
        self.channel.sendall(data)

    def finish(self) -> tuple[int, bytes, bytes]:
        self.channel.shutdown_write()
        out, err = self.drain(self.channel, None)
        return self.channel.recv_exit_status(), out, bytes(self.err) + err

    def close(self) -> None:
        self.channel.close()


class ProcessStream:
    """A local process: stdin and stdout as pipes, stderr read on a thread of its own."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.err = bytearray()
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()

    def _read_stderr(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(1 << 16), b""):
            self.err += chunk

    def read(self, size: int) -> bytes:
        return self.proc.stdout.read1(size)

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def finish(self) -> tuple[int, bytes, bytes]:
        try:
            self.proc.stdin.close()
        except OSError:
            pass  # it exited without reading everything: its exit code says why
        out = self.proc.stdout.read()
        code = self.proc.wait()
        self.reader.join()
        return code, out, bytes(self.err)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
