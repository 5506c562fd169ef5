"""The spec's servers grouped as Kubernetes schedules them (pure): a pod per host of a DP group, a gang per
group (scheduled together) or per independent instance, as the spec's flavour groups them."""

from __future__ import annotations

from typing import Optional

from deployctl.export.gang_types import Gang
from deployctl.servers import flavour_of
from deployctl.spec.model import Instance, Spec


def gangs(spec: Spec) -> tuple[Gang, ...]:
    """Every serving gang in spec order; the front (scheduler, proxy) is not one."""
    return flavour_of(spec).export_gangs(spec)


def proxy(spec: Spec) -> Optional[Instance]:
    found = spec.role("proxy")
    return found[0] if found else None
