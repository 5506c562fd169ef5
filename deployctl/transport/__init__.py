"""The one interface to hosts: run a command, put a file, get a file, close."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union

from deployctl.core import Command, Secret


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

    def put(self, path: str, content: Union[bytes, Secret], *, mode: int = 0o644) -> None: ...

    def get(self, path: str) -> bytes: ...

    def close(self) -> None: ...


def stdin_bytes(stdin: Union[Secret, bytes, None]) -> bytes | None:
    """Reveal a command's stdin for the process; only transports call this."""
    if stdin is None:
        return None
    value = stdin.reveal() if isinstance(stdin, Secret) else stdin
    return value.encode() if isinstance(value, str) else value
