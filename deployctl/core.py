"""The base types every layer shares: a secret value and a command as data (spec/ and plan/ both import them)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional, Sequence, Union


class Secret:
    """A value that must never be printed; `.reveal()` only at the transport edge."""

    __slots__ = ("_value", "label")

    def __init__(self, value: str | bytes, label: str = "***") -> None:
        self._value = value
        self.label = label

    def reveal(self) -> str | bytes:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.label})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Command:
    """A process to run: raw argv words (quoted once, at the transport) and optional stdin."""

    argv: tuple[str, ...]
    stdin: Union[Secret, bytes, None] = None
    check: bool = True  # False: a non-zero exit is expected and harmless (e.g. removing what may not exist)
    failure: str = ""  # what a non-zero exit means, said instead of "command failed with exit code N"

    def display(self) -> str:
        """What --dry-run prints and what logs show; a secret stdin shows as its label."""
        text = shlex.join(self.argv)
        if self.stdin is None:
            return text
        shown = repr(self.stdin) if isinstance(self.stdin, Secret) else f"<{len(self.stdin)} bytes>"
        return f"{text}  # stdin: {shown}"


def flag_value(words: Sequence, flags: Sequence[str]) -> Optional[str]:
    """The value the last of `flags` takes in an argv (`--flag X` or `--flag=X`, as argparse reads it); None where
    none is given: the one reader of a rendered or extra-args argv, so no caller walks the words by hand."""
    words = [str(w) for w in words]
    value = None
    for i, word in enumerate(words):
        name, eq, rest = word.partition("=")
        if name in flags:
            if eq:
                value = rest
            elif i + 1 < len(words):
                value = words[i + 1]
    return value
