"""The front kinds keyed by name (pure). Adding a front: its module, one entry here, and its `kind` value in
spec/schema.json where the spec writes it as topology.front."""

from __future__ import annotations

from typing import Optional

from deployctl.fronts.base import FrontKind
from deployctl.fronts.proxy import Proxy
from deployctl.fronts.router import Router
from deployctl.fronts.scheduler import Scheduler
from deployctl.fronts.sglang_router import SglangRouter

# In the order Spec.front looks for them.
FRONTS: dict[str, FrontKind] = {f.name: f for f in (Scheduler(), Proxy(), Router(), SglangRouter())}
FRONT_ROLES: tuple[str, ...] = tuple(f.role for f in FRONTS.values())


def front_kind(name: Optional[str]) -> Optional[FrontKind]:
    """The front of kind `name` (topology.front.kind), or None where no such kind exists."""
    return FRONTS.get(name or "")


def front_for_role(role: str) -> Optional[FrontKind]:
    """The front an instance of `role` runs, or None where it runs a server."""
    return next((f for f in FRONTS.values() if f.role == role), None)
