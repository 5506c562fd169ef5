"""Document values as the model holds them (pure), for the loader and the flavours that build their own
instances (servers/vllm_ascend/topology.py): an env mapping, a CPU quantity."""

from __future__ import annotations

from typing import Optional

from deployctl.core import Secret
from deployctl.spec.model import EnvVar


def _env_text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def env_vars(entry: dict, references: dict, where: tuple = ("env",)) -> tuple[EnvVar, ...]:
    """An env mapping (the spec's, or a DP group's at `where`): a value that came from ${VAR} becomes a Secret,
    shown as its original text."""
    out = []
    for name, value in entry.items():
        original = references.get(where + (name,))
        if original is not None:
            out.append(EnvVar(name, Secret(_env_text(value), label=original), display=original))
        else:
            out.append(EnvVar(name, _env_text(value), display=_env_text(value)))
    return tuple(out)


def quantity(value) -> Optional[str]:
    """A CPU count as YAML may give it (16) as the quantity string Kubernetes takes ("16")."""
    return None if value is None else str(value)
