"""Where a `${VAR}` reference may stand, and the guard that keeps resolved values out of every message.

`env` values become Secrets (sent through the 0600 env file); a few connection and location keys take a plain
substitution; anywhere else a reference is refused, so a token can never become an argv word or a file name.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable, Mapping

from deployctl.errors import Problem
from deployctl.spec.show import quoted

GROUP_LISTS = ("groups", "prefill", "decode")  # vllm-ascend's DP groups, each with its own env
CONNECTION_KEYS = ("address", "user", "identity_file", "known_hosts", "jump")
_SSH_KEYS = ("user", "identity_file", "known_hosts", "jump")
_LOCATIONS = {("image", "name"), ("image", "build", "base"), ("image", "build", "packages"),
              ("weights", "source"), ("weights", "endpoint"), ("weights", "dest")}
MIN_SCRUBBED = 4
_VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ALLOWED_TEXT = ("env values (kept secret; the spec's, each DP group's and each hook's), hosts.*/ssh address, user, identity_file, known_hosts and jump, "
                "image.name, image.build.base/packages, weights.source/endpoint/dest")


def is_env_value(path: tuple) -> bool:
    """A value of an `env:` mapping: the spec's (`env.NAME`), a DP group's (`topology.prefill[0].env.NAME`) or a
    hook's (`hooks.pre_up.env.NAME`)."""
    if len(path) == 2:
        return path[0] == "env"
    if len(path) == 4 and path[0] == "hooks" and path[2] == "env":  # a hook's env reaches it as a container's does
        return True
    return (len(path) == 5 and path[0] == "topology" and path[1] in GROUP_LISTS and isinstance(path[2], int)
            and path[3] == "env")


def kind(path: tuple) -> str | None:
    """"secret" (an env value), "config" (plain substitution) or None (a reference is refused here)."""
    if is_env_value(path):
        return "secret"
    if len(path) == 3 and path[0] == "hosts" and path[2] in CONNECTION_KEYS:
        return "config"
    if len(path) == 2 and path[0] == "ssh" and path[1] in _SSH_KEYS:
        return "config"
    return "config" if tuple(path) in _LOCATIONS else None


def refused(references: Mapping[tuple, str]) -> list[Problem]:
    """One error per string that holds a `${VAR}` where none may stand (unlocated)."""
    out = []
    for path, original in references.items():
        if kind(path) is not None:
            continue
        hint = f"${{VAR}} is allowed in {ALLOWED_TEXT}"
        if "extra_args" in path:
            hint = ("pass a token through env: (vLLM reads VLLM_API_KEY and HF_TOKEN from its environment); "
                    + hint)
        out.append(Problem(tuple(path), f"{quoted(original)}: a ${{VAR}} reference is not allowed here", hint=hint))
    return out


def scrub(problems: Iterable[Problem], references: Mapping[tuple, str], data, environ: Mapping[str, str]) -> list:
    """The problems with every resolved reference put back as the `${VAR}` text the spec wrote.

    Whole resolved strings go first, then each variable's own value (a reference may be part of a string).
    """
    swaps: dict[str, str] = {}
    for path, original in references.items():
        resolved = _at(data, path)
        if isinstance(resolved, str) and resolved != original:
            _add(swaps, resolved, original)
        for name in _VARIABLE.findall(original):
            _add(swaps, environ.get(name) or "", "${" + name + "}")
    if not swaps:
        return list(problems)
    order = sorted(swaps, key=len, reverse=True)
    return [replace(p, message=_swap(p.message, order, swaps), hint=p.hint and _swap(p.hint, order, swaps))
            for p in problems]


def _add(swaps: dict[str, str], value: str, shown: str) -> None:
    # Shorter values are no secret and would garble unrelated words of a message.
    if len(value) >= MIN_SCRUBBED:
        swaps.setdefault(value, shown)
        swaps.setdefault(repr(value)[1:-1], shown)  # as quoted() shows it: a newline as \\n


def _swap(text: str, order: list[str], swaps: dict[str, str]) -> str:
    for value in order:
        if value in text:
            text = text.replace(value, swaps[value])
    return text


def _at(data, path: tuple):
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data
