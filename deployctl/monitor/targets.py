"""Prometheus file_sd target groups (pure): one per API server (its /metrics), one per front (probed by
blackbox_exporter: the scheduler and the proxy serve no /metrics; a router also serves its own metrics on a
port of their own, a target of its own), one per host for the NPU exporter and for
node_exporter. Every group carries the labels the dashboard and the alerts group by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.fronts import front_for_role
from deployctl.monitor import npu_exporter
from deployctl.servers import flavour_of
from deployctl.spec.model import Instance, Spec

LABELS = ("deployment", "role", "group", "rank", "host", "instance")
EXPECTED = "role_servers"  # on each API server's target: how many of its role the list holds (queries.EXPECTED)


@dataclass(frozen=True)
class Exporters:
    """What the hosts said: host name -> the TCP ports it listens on (doctor's `listening` fact); a host that is
    not in `listening` was not asked (its exporters are assumed present)."""

    listening: Optional[Mapping[str, frozenset[int]]] = None

    def state(self, host: str, port: int) -> str:
        """present | missing | unknown."""
        ports = (self.listening or {}).get(host)
        if ports is None:
            return "unknown"
        return "present" if port in ports else "missing"


@dataclass(frozen=True)
class Target:
    address: str  # HOST:PORT (a URL for a front probed by blackbox_exporter)
    labels: tuple[tuple[str, str], ...]

    def to_json(self) -> dict:
        return {"targets": [self.address], "labels": dict(self.labels)}


@dataclass(frozen=True)
class Targets:
    servers: tuple[Target, ...]
    fronts: tuple[Target, ...]
    npu: tuple[Target, ...]
    node: tuple[Target, ...]
    notes: tuple[str, ...]  # what is missing, said once each
    router: tuple[Target, ...] = ()  # a vllm-router front's own /metrics (its --prometheus-port)


def _labels(spec: Spec, instance: Instance) -> tuple[tuple[str, str], ...]:
    """Its `group` and `rank` as its flavour numbers them (a vllm-ascend server's DP group and first DP rank)."""
    numbered = flavour_of(spec).monitor_labels(instance)
    return (("deployment", spec.name), ("role", instance.role), ("group", numbered["group"]),
            ("rank", numbered["rank"]), ("host", instance.host), ("instance", instance.name))


def _host_labels(spec: Spec, host: str, role: str) -> tuple[tuple[str, str], ...]:
    return (("deployment", spec.name), ("role", role), ("group", ""), ("rank", ""), ("host", host),
            ("instance", host))


def build_targets(spec: Spec, exporters: Optional[Exporters] = None, deployed: bool = True,
                  leave_out: frozenset[str] = frozenset()) -> Targets:
    """Every target of the deployment, in spec order (`deployed=False`, after `down`: none); `leave_out`: the
    containers `up` is about to (re)start, listed again once they serve."""
    exporters = exporters or Exporters()
    flavour = flavour_of(spec)
    monitor = spec.monitor
    npu_port = monitor.npu_exporter_port if monitor else npu_exporter.DEFAULT_PORT
    node_port = monitor.node_exporter_port if monitor else 9100
    if not deployed:
        return Targets((), (), (), (), (f"{spec.name} is not deployed: every target list is empty",))
    servers, fronts, router, notes = [], [], [], []
    front = spec.front
    per_role: dict[str, int] = {}
    listed = [i for i in spec.instances if i.name not in leave_out]
    for instance in listed:
        if instance is not front and flavour.metrics_endpoint(instance) is not None:
            per_role[instance.role] = per_role.get(instance.role, 0) + 1
    for instance in listed:
        address = spec.host(instance.host).address
        if instance is front:
            path = flavour.health_path(instance)
            fronts.append(Target(f"http://{address}:{instance.port}{path}", _labels(spec, instance)))
            own = front_for_role(instance.role)
            metrics_port = own.metrics_port(instance) if own is not None else None
            if metrics_port:  # a router's own metrics port (vllm-router, sglang-router)
                router.append(Target(f"{address}:{metrics_port}", _labels(spec, instance)))
            continue
        endpoint = flavour.metrics_endpoint(instance)
        if endpoint is None:
            continue  # a headless vllm-ascend server: its engines report through the head's API server
        port, path = endpoint
        labels = _labels(spec, instance) + ((EXPECTED, str(per_role[instance.role])),) + (
            (("__metrics_path__", path),) if path != "/metrics" else ())
        servers.append(Target(f"{address}:{port}", labels))
    npu, node = [], []
    taken = {(i.host, port) for i in spec.instances for _, port in i.own_ports}
    for host in spec.used_hosts:
        for port, what in ((npu_port, npu_exporter.TITLE), (node_port, "node_exporter")):
            if port and (host.name, port) in taken:
                notes.append(f"{host.name}: port {port} is a server's port in this spec, not {what}'s: no "
                             f"{what} target there (set monitor.{'npu' if port == npu_port else 'node'}"
                             "_exporter_port to the port it listens on)")
        if flavour.platform == "ascend" and npu_port and (host.name, npu_port) not in taken:
            state = exporters.state(host.name, npu_port)
            if state == "missing":
                notes.append(f"{host.name}: no {npu_exporter.TITLE} listening on port {npu_port} — install it "
                             "(github.com/Ascend/mind-cluster, component/npu-exporter) or set "
                             "monitor.npu_exporter_port; the NPU panels stay empty for this host")
            else:
                npu.append(Target(f"{host.address}:{npu_port}", _host_labels(spec, host.name, "npu-exporter")))
        if node_port and (host.name, node_port) not in taken:
            state = exporters.state(host.name, node_port)
            if state == "missing":
                notes.append(f"{host.name}: no node_exporter listening on port {node_port}: no node target")
            else:
                node.append(Target(f"{host.address}:{node_port}", _host_labels(spec, host.name, "node-exporter")))
    return Targets(tuple(servers), tuple(fronts), tuple(npu), tuple(node), tuple(notes), tuple(router))
