"""Rules of plain HCCL ranktables (RANK_TABLE_FILE): version 1.0, and 1.2 with SuperPoD fields."""

from __future__ import annotations

from deployctl.ranktable.model import STATUS
from deployctl.ranktable.rules import Recorder, Uniques


def check_hccl(r: Recorder, document: dict, version: str) -> None:
    """rank ids 0..N-1 over all servers, each server's contiguous; v1.2: super ids and super_pod_list."""
    r.expect(document, "version", (), version, "version")
    r.expect(document, "status", (), STATUS, "status")
    servers = r.items(document, "server_list", ())
    r.server_count(document, (), len(servers))
    total = sum(len(s["device"]) for s in servers if isinstance(s, dict) and isinstance(s.get("device"), list))
    ips = Uniques(r, "device_ip unique")
    ranks = Uniques(r, "rank_id")
    server_ids = Uniques(r, "server_id unique")
    for s, server in enumerate(servers):
        if not isinstance(server, dict):
            continue
        path = ("server_list", s)
        server_id = r.ipv4(server, "server_id", path)
        if server_id is not None:
            server_ids.see(server_id, path + ("server_id",), f"server {server_id}")
        npus = Uniques(r, "device_id unique")
        own_ranks: list[int] = []
        for d, device in enumerate(r.items(server, "device", path)):
            if not isinstance(device, dict):
                continue
            where = path + ("device", d)
            device_id = r.device_id(device, where)
            if device_id is not None:
                npus.see(device_id, where + ("device_id",), f"NPU {device_id}")
            device_ip = r.ipv4(device, "device_ip", where)
            if device_ip is not None:
                ips.see(device_ip, where + ("device_ip",), device_ip)
            if version == "1.2":
                r.count(device, "super_device_id", where, "super_device_id")
            rank = r.count(device, "rank_id", where, "rank_id")
            if rank is None:
                continue
            if rank >= total:
                r.add(where + ("rank_id",), "rank_id", f'"{rank}" out of range: {total} devices have rank ids 0..{total - 1}')
            else:
                ranks.see(rank, where + ("rank_id",), f'rank_id "{rank}"')
                own_ranks.append(rank)
        if own_ranks and sorted(own_ranks) != list(range(min(own_ranks), min(own_ranks) + len(own_ranks))):
            r.add(path + ("device",), "rank_id", f"rank ids {sorted(own_ranks)} of one server are not contiguous")
    if version == "1.2":
        _super_pods(r, document, set(server_ids.seen))


def _super_pods(r: Recorder, document: dict, server_ids: set) -> None:
    """Every server of a SuperPoD exists in server_list, and sits in one pod only."""
    members = Uniques(r, "super_pod_list")
    for p, pod in enumerate(r.items(document, "super_pod_list", ())):
        if not isinstance(pod, dict):
            continue
        path = ("super_pod_list", p)
        r.count(pod, "super_pod_id", path, "super_pod_id")
        for s, entry in enumerate(r.items(pod, "server_list", path)):
            if not isinstance(entry, dict):
                continue
            server_id = r.string(entry, "server_id", path + ("server_list", s))
            if server_id is None:
                continue
            where = path + ("server_list", s, "server_id")
            if server_id not in server_ids:
                r.add(where, "super_pod_list", f'"{server_id}" is not a server_id of server_list')
            members.see(server_id, where, f"server {server_id}")
