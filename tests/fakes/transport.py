"""FakeTransport: scripted by argv, records what ran and what was put (no host involved)."""

from __future__ import annotations

import re
from typing import Callable, Union

from deployctl.core import Command, Secret
from deployctl.transport import Result, stdin_bytes

Response = Union[str, Result, Callable[[Command], Result]]


class FakeTransport:
    def __init__(self, name: str = "fake", responses: dict | None = None, address: str = "fake") -> None:
        self.name, self.address = name, address
        self.responses = dict(responses or {})
        self.ran: list[Command] = []
        self.files: dict[str, tuple[bytes, int]] = {}

    def run(self, command: Command, *, timeout=None) -> Result:
        self.ran.append(command)
        for key, response in self.responses.items():
            matched = key == command.argv if isinstance(key, tuple) else re.search(key, " ".join(command.argv))
            if matched:
                if callable(response):
                    return response(command)
                if isinstance(response, Result):
                    return response
                return Result(command.argv, 0, response, "")
        return Result(command.argv, 0, "", "")

    def run_streaming(self, command: Command, on_line, *, timeout=None) -> Result:
        result = self.run(command, timeout=timeout)
        for line in result.stderr.splitlines():
            on_line(line)
        return result

    def open_stream(self, command: Command) -> "ScriptedStream":
        return ScriptedStream(self.run(command))

    def put(self, path: str, content: Union[bytes, Secret], *, mode: int = 0o644) -> None:
        self.files[path] = (stdin_bytes(content) or b"", mode)

    def get(self, path: str) -> bytes:
        return self.files[path][0]

    def close(self) -> None:
        pass


class ScriptedStream:
    """A command's streams as scripted: its stdout to read, what is written kept, its result at the end."""

    def __init__(self, result: Result) -> None:
        self.result, self.unread, self.written = result, result.stdout.encode(), bytearray()

    def read(self, size: int) -> bytes:
        chunk, self.unread = self.unread[:size], self.unread[size:]
        return chunk

    def write(self, data: bytes) -> None:
        self.written += data

    def finish(self) -> tuple[int, bytes, bytes]:
        rest, self.unread = self.unread, b""
        return self.result.exit_code, rest, self.result.stderr.encode()

    def close(self) -> None:
        pass
