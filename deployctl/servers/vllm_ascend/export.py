"""vllm-ascend's export mapping (pure): its DP groups as gangs, a worker's templated DP rank and master, the
targets that cannot run an external launch's groups, the proxy's lists as the cluster names the servers."""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from deployctl.export.gang_types import Gang, Pod
from deployctl.servers.vllm_ascend.upstream import HostNetwork, proxy_command
from deployctl.servers.vllm_ascend.groups import kv_ports
from deployctl.spec.model import Instance, Spec

ADDRESS_FLAG = "--data-parallel-address"
RANK_FLAGS = ("--data-parallel-start-rank", "--data-parallel-rank")  # internal, external


def dp_gangs(spec: Spec) -> tuple[Gang, ...]:
    """A gang per DP group: a pod per host, leader first; a P/D group's kv ports per host."""
    out = []
    for group in spec.upstream.groups:
        mine = [i for i in spec.instances if i.server is not None and i.server.group == group]
        pods = []
        for h, host in enumerate(group.hosts):
            on = tuple(i for i in mine if i.host == host)
            pods.append(Pod(on[0].name if len(on) == 1 else f"{spec.name}-{group.label}-{host}", on, h))
        npus = ("dp", f"dp {group.dp} over {len(group.hosts)} host(s) x tp {group.tp}")
        ports = tuple((host, kv_ports(group, host)) for host in group.hosts) if group.binds_kv_ports else ()
        out.append(Gang(f"{spec.name}-{group.label}", group.role, tuple(pods), mine[0].path, npus, ports))
    return tuple(out)


def worker_values(instance: Instance, leader: str, index: str) -> dict[str, str]:
    """A worker's DP master is the leader's IP and its rank = worker index x ranks per host + local rank."""
    server = instance.server
    rank = f"$(({index} * {server.group.ranks_per_host} + {server.ranks[0].local}))"
    return {ADDRESS_FLAG: leader, **{flag: rank for flag in RANK_FLAGS}}


def gang_refusal(spec: Spec, target: str) -> Optional[tuple[str, str]]:
    if target == "kthena" and spec.upstream.dp_launch == "external" and spec.mode == "disaggregated":
        return ("with dp_launch: external every rank serves an API the proxy lists, and Kthena's worker pods have "
                "no stable address (only the entry pod gets a headless Service)",
                "use dp_launch: internal (only the first host serves the API), or --to lws")
    return None


def cluster_proxy_command(spec: Spec, proxy: Instance, networks: Mapping[str, HostNetwork],
                          address: Callable[[Instance], str]) -> tuple[str, ...]:
    """The proxy's command, each server named by `address` of its instance."""
    by_server = {i.server: i for i in spec.instances if i.server is not None}
    return proxy_command(spec, proxy, networks, lambda server: address(by_server[server]))
