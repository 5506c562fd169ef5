"""Rules of `hooks:` beyond the schema, each said at its own path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem
from deployctl.spec.show import quoted

if TYPE_CHECKING:
    from deployctl.spec.rules import Context


def check_hooks(c: "Context") -> Iterator[Problem]:
    """A word or env value with a NUL byte: no process can take it (an argv word and an environment value end at
    the first NUL), so it would run something other than what the spec says."""
    hooks = c.value(("hooks",), dict) or {}
    for point in hooks:
        for index, word in enumerate(c.value(("hooks", point, "command"), list) or ()):
            if isinstance(word, str) and "\0" in word:
                yield Problem(("hooks", point, "command", index), f"{quoted(word)} holds a NUL byte: no command "
                                                                  "can take it as a word")
        for name, value in (c.value(("hooks", point, "env"), dict) or {}).items():
            if isinstance(value, str) and "\0" in value:
                yield Problem(("hooks", point, "env", name), f"{quoted(value)} holds a NUL byte: an environment "
                                                             "value cannot")
