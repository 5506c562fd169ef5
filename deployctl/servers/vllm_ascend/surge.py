"""A vllm-ascend DP group's surge (pure): a new group shaped as the one it stands in for, every rank, on cards
free on each of its hosts, with its own index (so its own engine id) and free API, kv and rpc ports."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from deployctl.servers.surge import SURGE_PORT_OFFSET, SURGE_SUFFIX
from deployctl.servers.vllm_ascend.groups import servers_of, with_server
from deployctl.spec.port_uses import MAX_PORT

if TYPE_CHECKING:
    from deployctl.spec.model import Instance


def group_surge(members: tuple["Instance", ...], index: int, launch: str, free: dict, taken: dict):
    """The servers of a new DP group shaped as `members`' (same dp, tp, hosts), on cards free on every one of its
    hosts (a group's devices are the same ids on each), each server named after the one it stands in for; None
    when the cards or ports are not there."""
    group = members[0].server.group
    if any(host not in free for host in group.hosts):
        return None
    common = [c for c in free[group.hosts[0]] if all(c in free[h] for h in group.hosts)]
    need = group.ranks_per_host * group.tp
    if len(common) < need:
        return None
    busy = set().union(*(taken[h] for h in group.hosts))

    def run_from(first: int, count: int) -> Optional[int]:
        """The first port from `first` starting `count` free ones in a row."""
        for base in range(first, MAX_PORT - count + 2):
            if not any(p in busy for p in range(base, base + count)):
                busy.update(range(base, base + count))
                return base
        return None

    api = run_from(group.port + SURGE_PORT_OFFSET, group.ranks_per_host if launch == "external" else 1)
    kv = run_from(group.kv_port_base + SURGE_PORT_OFFSET, group.dp * group.tp) if group.binds_kv_ports \
        else group.kv_port
    rpc = run_from(group.data_parallel_rpc_port + SURGE_PORT_OFFSET, 1)
    if api is None or (kv is None and group.binds_kv_ports) or rpc is None:
        return None
    surge = replace(group, index=index, number=None, devices=tuple(common[:need]), port=api, kv_port=kv,
                    rpc_port=rpc)
    servers = servers_of(surge, need, launch)
    if len(servers) != len(members):
        return None
    for host in group.hosts:
        free[host] = [c for c in free[host] if c not in surge.devices]
        taken[host].update(busy)
    return tuple(with_server(replace(m, devices=s.devices, port=s.port, name=m.name + SURGE_SUFFIX), s)
                 for m, s in zip(members, servers))
