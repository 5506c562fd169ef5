"""LocalTransport: the machine deployctl runs on, no SSH (`address: local`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Union

from deployctl.errors import HostError
from deployctl.core import Command, Secret
from deployctl.transport import Result, stdin_bytes
from deployctl.transport.stream import ProcessStream


class LocalTransport:
    """Runs argv with subprocess (never a shell) and writes files atomically."""

    def __init__(self, name: str = "local", address: str = "local") -> None:
        self.name = name
        self.address = address

    def run(self, command: Command, *, timeout: float | None = None) -> Result:
        try:
            proc = subprocess.run(
                list(command.argv),
                input=stdin_bytes(command.stdin) or b"",
                capture_output=True,
                timeout=timeout,
            )
        except FileNotFoundError:
            return Result(command.argv, 127, "", f"{command.argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            raise HostError(self.name, f"timed out after {timeout} s", command=command.display()) from None
        return Result(
            command.argv,
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )

    def run_streaming(self, command: Command, on_line, *, timeout: float | None = None) -> Result:
        """Like run, and calls on_line(text) for each stderr line as it arrives."""
        import threading

        try:
            proc = subprocess.Popen(list(command.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except FileNotFoundError:
            return Result(command.argv, 127, "", f"{command.argv[0]}: command not found")
        err: list[bytes] = []

        def read_stderr() -> None:
            for raw in proc.stderr:
                err.append(raw)
                on_line(raw.decode("utf-8", "replace").rstrip("\n"))

        def feed_stdin() -> None:
            try:
                proc.stdin.write(stdin_bytes(command.stdin) or b"")
                proc.stdin.close()
            except OSError:
                pass  # the program exited without reading everything: its exit code says why

        threads = [threading.Thread(target=read_stderr, daemon=True), threading.Thread(target=feed_stdin, daemon=True)]
        for thread in threads:
            thread.start()
        out = proc.stdout.read()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise HostError(self.name, f"timed out after {timeout} s", command=command.display()) from None
        for thread in threads:
            thread.join()
        return Result(command.argv, proc.returncode, out.decode("utf-8", "replace"),
                      b"".join(err).decode("utf-8", "replace"))

    def open_stream(self, command: Command) -> ProcessStream:
        """Start a command and hand back its streams, to move bytes in or out (image shipping)."""
        try:
            return ProcessStream(list(command.argv))
        except FileNotFoundError:
            raise HostError(self.name, f"{command.argv[0]}: command not found", command=command.display()) from None

    def put(self, path: str, content: Union[bytes, Secret], *, mode: int = 0o644) -> None:
        data = stdin_bytes(content) or b""
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".deployctl-")
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def get(self, path: str) -> bytes:
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise HostError(self.name, f"cannot read {path}: {exc.strerror}") from None

    def close(self) -> None:
        pass
