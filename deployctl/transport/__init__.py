"""The one interface to hosts: run a command (or stream its stderr lines), open its byte streams, put, get, close."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Union

from deployctl.core import Command, Secret

if TYPE_CHECKING:
    from deployctl.transport.stream import Stream


@dataclass(frozen=True)
class Result:
    """What a command did: never raised for a non-zero exit."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Transport(Protocol):
    name: str
    address: str

    def run(self, command: Command, *, timeout: float | None = None) -> Result: ...

    def run_streaming(self, command: Command, on_line, *, timeout: float | None = None) -> Result:
        """Like run, calling on_line(text) for each stderr line as it arrives (progress)."""

    def open_stream(self, command: Command) -> "Stream":
        """The running command's byte streams (transport.stream.Stream)."""

    def put(self, path: str, content: Union[bytes, Secret], *, mode: int = 0o644) -> None: ...

    def get(self, path: str) -> bytes: ...

    def close(self) -> None: ...


def stdin_bytes(stdin: Union[Secret, bytes, None]) -> bytes | None:
    """Reveal a command's stdin for the process; only transports call this."""
    if stdin is None:
        return None
    value = stdin.reveal() if isinstance(stdin, Secret) else stdin
    return value.encode() if isinstance(value, str) else value
