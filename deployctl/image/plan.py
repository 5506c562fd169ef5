"""Decide per host: build, ship or skip, and why (pure: facts in, actions out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from deployctl.errors import UsageError
from deployctl.facts.image_state import HostImage


@dataclass(frozen=True)
class HostAction:
    host: str
    action: str  # build | ship | skip
    reason: str
    inputs: Optional[str] = None  # the hash the image will carry (None: not known before the base is pulled)
    source: Optional[str] = None  # ship: the host it comes from


def plan_image_build(hosts: Sequence[str], where: str, facts: Mapping[str, HostImage],
                     inputs_for) -> tuple[HostAction, ...]:
    """`inputs_for(base_id) -> digest`. each-host: every host builds unless its label matches; once: the first
    host builds (or is skipped) and the others get its image shipped unless theirs matches."""
    if not hosts:
        return ()
    if where == "once":
        builder = hosts[0]
        wanted = inputs_for(facts[builder].base_id) if facts[builder].base_id else None
        actions = [_build_or_skip(builder, facts[builder], wanted)]
        for host in hosts[1:]:
            have = facts[host].inputs
            if wanted and have == wanted:
                actions.append(HostAction(host, "skip", f"image has {_short(wanted)} already", wanted))
            else:
                why = "image missing" if not facts[host].image_id else (
                    f"image has inputs {_short(have)}" if have else "image was not built by deployctl")
                actions.append(HostAction(host, "ship", f"{why}: ship from {builder}", wanted, builder))
        return tuple(actions)
    return tuple(_build_or_skip(host, facts[host], inputs_for(facts[host].base_id) if facts[host].base_id else None)
                 for host in hosts)


def _build_or_skip(host: str, have: HostImage, wanted: Optional[str]) -> HostAction:
    if wanted is None:
        return HostAction(host, "build", "base image missing: pull it, then build")
    if have.inputs == wanted:
        return HostAction(host, "skip", f"image has {_short(wanted)} already", wanted)
    if not have.image_id:
        return HostAction(host, "build", "image missing", wanted)
    if have.inputs:
        return HostAction(host, "build", f"inputs changed: {_short(have.inputs)} -> {_short(wanted)}", wanted)
    return HostAction(host, "build", "image was not built by deployctl (no inputs label)", wanted)


def _short(digest: Optional[str]) -> str:
    return (digest or "").replace("sha256:", "")[:12]


def check_compat(version: str, drivers: Mapping[str, Optional[str]], rows=None) -> None:
    """The package's release must be the table's row for each host's NPU driver (hosts without one pass)."""
    from deployctl.facts.compat import rows_for_driver, row_for_release

    row = row_for_release(version, rows)
    for host, driver in drivers.items():
        if not driver:
            continue
        if row is None:
            raise UsageError(f"AscendCloud {version} is not in the compatibility table (host {host} has driver "
                             f"{driver})", hint="use a release listed for the driver: "
                             + (", ".join(r.ascendcloud for r in rows_for_driver(driver, rows)) or "none known"))
        if version not in {r.ascendcloud for r in rows_for_driver(driver, rows)}:
            known = ", ".join(r.ascendcloud for r in rows_for_driver(driver, rows)) or "none"
            raise UsageError(f"{host}: NPU driver {driver} does not match AscendCloud {version} "
                             f"(it needs driver {row.driver})", hint=f"releases for driver {driver}: {known}")
