"""A rollout's surge server (pure): one more server of a unit, started on free cards and ports before the unit is
drained (plan/rollout.py plans its waves; a flavour's `surge_unit` lays its servers out)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from deployctl.spec.model import Instance

SURGE_SUFFIX = "-surge"
SURGE_PORT_OFFSET = 1000  # a surge server listens above its instance's port, on the first port free there


def instance_surge(members: tuple["Instance", ...], free: dict[str, list[int]],
                   taken: dict[str, set[int]]) -> Optional[tuple["Instance", ...]]:
    """A one-instance unit again on free cards of its host and the first free port above its own, taking them from
    `free` and `taken`; None when the unit has more instances, the cards are not there or it serves no port."""
    instance = members[0]
    cards = free.get(instance.host, [])
    if len(members) != 1 or len(cards) < len(instance.devices) or instance.port is None:
        return None
    port = next(p for p in range(instance.port + SURGE_PORT_OFFSET, 65536) if p not in taken[instance.host])
    taken[instance.host].add(port)
    devices, free[instance.host] = tuple(cards[:len(instance.devices)]), cards[len(instance.devices):]
    return (replace(instance, devices=devices, port=port, name=instance.name + SURGE_SUFFIX),)
