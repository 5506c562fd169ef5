"""The front kinds keyed by name (pure). Adding a front: its module in this package, with its FrontKind subclass,
and its `kind` value in spec/schema.json where the spec writes it as topology.front (no list here to edit)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Optional

from deployctl.fronts.base import FrontKind


def _kinds() -> dict[str, FrontKind]:
    """One FrontKind of each class defined in a module of this package, by module name then definition order."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda info: info.name):
        if info.name == "registry":
            continue
        module = importlib.import_module(f"deployctl.fronts.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, FrontKind) and value is not FrontKind
                    and value.__module__ == module.__name__):
                front = value()
                found[front.name] = front
    return found


FRONTS: dict[str, FrontKind] = _kinds()
FRONT_ROLES: tuple[str, ...] = tuple(f.role for f in FRONTS.values())


def front_kind(name: Optional[str]) -> Optional[FrontKind]:
    """The front of kind `name` (topology.front.kind), or None where no such kind exists."""
    return FRONTS.get(name or "")


def front_for_role(role: str) -> Optional[FrontKind]:
    """The front an instance of `role` runs, or None where it runs a server."""
    return next((f for f in FRONTS.values() if f.role == role), None)
