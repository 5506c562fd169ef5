"""Every port a deployment binds on a host, in one set (pure), and the one check over it (issue 39 item 6): two users
of one port on one machine are a `validate` error naming both, where each is set in the spec. The set is built
from the document as `validate` reads it (`document_ports`) and from the Spec that doctor, `up`'s ports stage and
rollout's surge read (`spec_ports`), through the same builders of each kind of port, so they agree on every port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional, Sequence

from deployctl.fronts import front_for_role, front_kind
from deployctl.spec.port_uses import (
    DEFAULT_PROXY_PORT, HOST, MAX_PORT, Path, PortUse, document_router_metrics, dotted, front_name,
    front_port, ids, router_metrics_port,
)

if TYPE_CHECKING:
    from deployctl.spec.model import Spec
    from deployctl.spec.rules import Context

EXPORTERS = (("npu_exporter_port", "MindCluster npu-exporter"), ("node_exporter_port", "node_exporter"))


# The builders of each kind of port: both representations go through them.

def instance_ports(path: Path, host: str, port: Optional[int], extras: Iterable[tuple[str, Optional[int], int]],
                   scheduler: bool = False, default_port: Optional[int] = None) -> Iterator[PortUse]:
    """An AscendCloud/GPU/Triton instance or the AscendCloud scheduler: its `port` (None: `default_port`), and
    each (key, value or None when defaulted, offset from port) its flavour listens on besides (Triton's)."""
    where = dotted(path)
    if port is None and default_port is not None:
        yield PortUse(host, default_port, where, path, default=f"default port {default_port}")
        port = default_port
    elif port is not None:
        yield PortUse(host, port, f"{where}.port", path + ("port",))
    if scheduler or port is None:
        return
    for key, value, offset in extras:
        if value is not None:
            yield PortUse(host, value, f"{where}.{key}", path + (key,))
        else:
            yield PortUse(host, port + offset, where, path + ("port",), default=f"default {key} {port + offset}")


def exporter_ports(hosts: Iterable[str], ports: Iterable[tuple[str, int]]) -> Iterator[PortUse]:
    """The exporters the monitoring pack scrapes on every host of the deployment ((monitor key, port)): the host
    runs them, so a server on that port fails to bind (or is scraped as the exporter)."""
    hosts = list(dict.fromkeys(hosts))
    for key, port in ports:
        name = dict(EXPORTERS)[key]
        for host in hosts:
            yield PortUse(host, port, name, ("monitor", key), where=f"monitor.{key}", owner=HOST)


# The document as validate reads it (values that failed the schema are left out).

def document_ports(c: "Context") -> list[PortUse]:
    """Every port the spec's deployment binds, in spec order: servers, then the front, then the exporters."""
    own = c.flavour.document_ports(c)  # vllm-ascend's DP groups and its front
    uses = list(own) if own is not None else _unit_ports(c)
    uses += exporter_ports([u.host for u in uses], _written_exporters(c))
    return uses


def _unit_ports(c: "Context") -> list[PortUse]:
    """Each instance's ports and the AscendCloud scheduler's, then topology.front's."""
    from deployctl.spec.rules import DEFAULT_SCHEDULER_PORT

    uses: list[PortUse] = []
    for unit in c.units():
        host = c.host_of(unit)
        if host is None or unit.node:  # a server's further node binds no port deployctl gives it
            continue
        port = c.value(unit.path + ("port",), int)
        is_front = front_for_role(unit.role) is not None  # the AscendCloud scheduler, one of its flavour's units
        if is_front and "port" not in unit.data:
            uses += instance_ports(unit.path, host, None, (), True, DEFAULT_SCHEDULER_PORT)
        elif port is not None:
            extras = [(key, c.value(unit.path + (key,), int) if key in unit.data else None, offset)
                      for key, offset in c.flavour.ports_of(unit.role, c.nodes(unit))]
            extras = [e for e in extras if e[1] is not None or e[0] not in unit.data]  # a failed value: none
            uses += instance_ports(unit.path, host, port, extras, is_front)
    front = c.value(("topology", "front"), dict)
    host = c.value(("topology", "front", "host"), str)
    if front is not None and host is not None and (c.hosts is None or host in c.hosts):
        port = c.value(("topology", "front", "port"), int)
        if "port" not in front or port is not None:
            uses.append(front_port(("topology", "front"), host, port,
                                   front_name(c.value(("topology", "front", "kind"), str)), DEFAULT_PROXY_PORT))
            uses += document_router_metrics(c, host)
    return uses


def _written_exporters(c: "Context") -> list[tuple[str, int]]:
    """(key, port) of each exporter port the spec's `monitor:` writes: a default is an assumption the pack checks
    on the hosts (and skips a port a server binds, NOTES.txt), a written port says the exporter listens there."""
    monitor = c.value(("monitor",), dict)
    if monitor is None:
        return []
    return [(key, port) for key, _ in EXPORTERS
            if (key != "npu_exporter_port" or c.platform == "ascend")
            for port in [c.value(("monitor", key), int)] if key in monitor and port]


# The Spec the plan reads (its kv ports as the hosts make them: servers/vllm_ascend/upstream.py's with_host_facts).

def spec_ports(spec: "Spec") -> list[PortUse]:
    """The same set from a loaded spec; its exporters at their ports, written or default."""
    from deployctl.servers import flavour_of

    servers = flavour_of(spec).spec_ports(spec)  # vllm-ascend's DP groups
    uses: list[PortUse] = list(servers or ())
    for instance in spec.instances:
        own = front_for_role(instance.role)
        if servers is not None and own is None:
            continue  # a server whose ports its flavour gave
        if own is not None and own.own_entry:
            kind = front_kind(spec.front_spec.kind) if spec.front_spec is not None else own
            uses.append(front_port(instance.path, instance.host, instance.port,
                                   kind.title if kind is not None else "the front", instance.port))
            default = kind.default_metrics_port if kind is not None else None
            if default is not None and instance.metrics_port is not None:
                # the loaded spec holds the default filled in: told apart from a written value by its number
                written = instance.metrics_port != default
                uses.append(router_metrics_port(instance.path, instance.host,
                                                instance.metrics_port if written else None, instance.metrics_port))
        elif instance.port is not None:
            extras = [(key, port, 0) for key, port in instance.own_ports if key != "port"]
            uses += instance_ports(instance.path, instance.host, instance.port, extras, own is not None)
    if spec.monitor is not None:
        flavour_ascend = spec.platform == "ascend"
        ports = [(key, getattr(spec.monitor, key)) for key, _ in EXPORTERS
                 if getattr(spec.monitor, key) and (key != "npu_exporter_port" or flavour_ascend)]
        uses += exporter_ports([i.host for i in spec.instances], ports)
    return uses


# The one check.

@dataclass(frozen=True)
class Collision:
    """`mine` binds `ports` on its host that `other`, listed before it, binds on the same machine; or, with
    `other` None, ports past 65535."""

    mine: PortUse
    other: Optional[PortUse]
    ports: tuple[int, ...]


def collisions(uses: Sequence[PortUse], machine: Callable[[str], str] = lambda host: host) -> list[Collision]:
    """Each pair of users of a port on one machine (`machine`: the machine a host name is), said once with every
    port they share; and each user of ports past 65535."""
    first: dict[tuple[str, int], PortUse] = {}
    found: dict[tuple, tuple[PortUse, Optional[PortUse], list[int]]] = {}
    for use in uses:
        if use.port > MAX_PORT:
            found.setdefault((use.user, None), (use, None, []))[2].append(use.port)
            continue
        taken = first.setdefault((machine(use.host), use.port), use)
        if taken.user != use.user:
            found.setdefault((use.user, taken.user), (use, taken, []))[2].append(use.port)
    return [Collision(mine, other, tuple(ports)) for mine, other, ports in found.values()]


def collision_message(collision: Collision, line: int = 0, same_machine: str = "") -> str:
    """`port 36000 on host node1 (the proxy) is already used by prefill group 0 kv ports 36000-36007
    (topology.prefill[0], line 16)`; `line`: the other's."""
    mine, ports = collision.mine, collision.ports
    shown = f"port {ports[0]}" if len(ports) == 1 else f"ports {ids(ports)}"
    own = [p for p in (mine.name if mine.name != dotted(mine.path) else "", mine.default) if p]
    own_said = f" ({', '.join(own)})" if own else ""
    if collision.other is None:
        return f"{mine.name} on host {mine.host} go past {MAX_PORT} ({shown})"
    verb = "is" if len(ports) == 1 else "are"
    return f"{shown} on host {mine.host}{own_said} {verb} already used by {collision.other.said(line)}{same_machine}"


def collision_hint(collision: Collision) -> Optional[str]:
    if collision.other is None:
        return "give a lower kv_port"
    if HOST in (collision.mine.owner, collision.other.owner):
        return ("the monitoring pack scrapes that exporter on every host of the deployment: move the server, or set "
                "the monitor key to the port the exporter listens on (null: none)")
    return None
