"""The ports a `server: vllm-ascend` deployment lays out itself (pure): each DP group's API, kv and rpc (DP master)
ports, and its front's, in the deployment's one port set (spec/port_set.py checks it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from deployctl.servers.vllm_ascend.groups import DpGroup, port_uses
from deployctl.spec.port_uses import PortUse, document_router_metrics, dotted, front_name, front_port

if TYPE_CHECKING:
    from deployctl.spec.model import Spec
    from deployctl.spec.rules import Context


def group_ports(group: DpGroup, launch: str, path: tuple, written: Iterable[str]) -> Iterator[PortUse]:
    """A DP group's API, kv and rpc (DP master) ports (groups.port_uses); `written`: its keys."""
    written = set(written)
    for host, port, key, what in port_uses(group, launch):
        at = path + (key,) if key in written else path
        yield PortUse(host, port, what, at, where=dotted(at))


def document_ports(c: "Context") -> list[PortUse]:
    """Its groups' ports as validate reads the document (those whose shape can launch), then its front's."""
    from deployctl.servers.vllm_ascend.rules_groups import front_key, launchable_groups, proxy_of

    uses: list[PortUse] = []
    launch = c.value(("topology", "dp_launch"), str) or "internal"
    for unit, group in launchable_groups(c):
        uses += group_ports(group, launch, unit.path, unit.data)
    proxy, key = proxy_of(c), front_key(c)
    if proxy is not None:
        kind = c.value(("topology", "front", "kind"), str) if key == "front" else "proxy"
        uses.append(front_port(("topology", key), proxy[0], proxy[1], front_name(kind), proxy[2]))
        if key == "front":
            uses += document_router_metrics(c, proxy[0])
    return uses


def spec_ports(spec: "Spec") -> list[PortUse]:
    """Its groups' ports in a loaded spec (its kv ports as the hosts make them: upstream.py's with_host_facts)."""
    uses: list[PortUse] = []
    for group in spec.upstream.groups:
        key = "groups" if group.role == "mixed" else group.role
        path = ("topology", key, group.number if group.number is not None else group.index)
        written = ["port"] + [k for k in ("kv_port", "rpc_port") if getattr(group, k) is not None]
        uses += group_ports(group, spec.upstream.dp_launch, path, written)
    return uses
