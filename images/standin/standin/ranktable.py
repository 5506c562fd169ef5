"""The P/D role and backends from the global + local ranktables, NODE_PORTS and the server arguments (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Backend:
    role: str  # prefill | decode
    server_ip: str
    port: int
    device_ids: Tuple[str, ...]


@dataclass(frozen=True)
class PdLayout:
    role: str  # prefill | decode | scheduler
    tp: int
    backends: Tuple[Backend, ...]  # prefill entries then decode entries, in global file order
    own_index: Optional[int]  # this instance's position in backends (None for the scheduler)
    scheduler_ip: str
    checks_passed: Tuple[str, ...]


class RanktableProblem(ValueError):
    """Every reason the P/D environment is unusable, joined into one log line by the caller."""

    def __init__(self, reasons: List[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def _groups(global_doc) -> Tuple[Optional[dict], List[str]]:
    if not isinstance(global_doc, dict) or not isinstance(global_doc.get("server_group_list"), list):
        return None, ["global ranktable has no server_group_list"]
    groups = global_doc["server_group_list"]
    ids = [g.get("group_id") if isinstance(g, dict) else None for g in groups]
    if ids != ["0", "1", "2"]:
        return None, [f"global ranktable is not complete: group_ids {ids}, expected ['0', '1', '2']"]
    by_id = {g["group_id"]: g.get("server_list") for g in groups}
    reasons = []
    for gid, what in (("0", "scheduler"), ("1", "prefill"), ("2", "decode")):
        if not isinstance(by_id[gid], list) or not by_id[gid]:
            reasons.append(f"global ranktable is not complete: group {gid} ({what}) has no server_list entries")
    if not reasons and len(by_id["0"]) != 1:
        reasons.append(f"global ranktable has {len(by_id['0'])} schedulers in group 0, expected exactly 1")
    return (None if reasons else by_id), reasons


def _device_ids(entry) -> Tuple[str, ...]:
    devices = entry.get("device") if isinstance(entry, dict) else None
    if not isinstance(devices, list):
        return ()
    return tuple(str(d.get("device_id")) for d in devices if isinstance(d, dict))


def _parse_node_ports(text: Optional[str]) -> Tuple[Optional[List[int]], List[str]]:
    if text is None or not text.strip():
        return None, ["NODE_PORTS is not set (prefill then decode ports, comma separated)"]
    try:
        return [int(p) for p in text.split(",")], []
    except ValueError:
        return None, [f"NODE_PORTS {text!r} is not a comma-separated list of ports"]


def pd_layout(global_doc, local_doc, node_ports: Optional[str], use_openai: Optional[str],
              tp: int, port: int) -> PdLayout:
    """Find this instance in the global file and check everything the vendor scheduler relies on."""
    reasons: List[str] = []
    passed: List[str] = []
    if use_openai != "1":
        reasons.append(f"USE_OPENAI is {use_openai!r}, expected '1'")
    else:
        passed.append("use_openai")
    by_id, problems = _groups(global_doc)
    reasons += problems
    ports, problems = _parse_node_ports(node_ports)
    reasons += problems
    local_list = local_doc.get("server_list") if isinstance(local_doc, dict) else None
    if not isinstance(local_list, list) or len(local_list) != 1:
        reasons.append("local ranktable must have exactly one server_list entry")
        local_entry = None
    else:
        local_entry = local_list[0]
    if by_id is None:
        raise RanktableProblem(reasons)
    passed.append("global_complete")

    entries = [("prefill", e) for e in by_id["1"]] + [("decode", e) for e in by_id["2"]]
    tps = {len(_device_ids(e)) for _, e in entries}
    if len(tps) != 1:
        reasons.append(f"prefill and decode instances must share one TP size, found {sorted(tps)}")
    elif tps != {tp}:
        reasons.append(f"ranktable TP is {tps.pop()} but --tensor-parallel-size is {tp}")
    else:
        passed.append("tp")

    role, own_index = None, None
    if local_entry is not None:
        matches = [i for i, (_, e) in enumerate(entries) if e == local_entry]
        if local_entry == by_id["0"][0]:
            role = "scheduler"
        elif len(matches) == 1:
            own_index = matches[0]
            role = entries[own_index][0]
        elif len(matches) > 1:
            reasons.append("local ranktable entry appears more than once in the global ranktable")
        else:
            reasons.append("local ranktable entry does not equal any entry of the global ranktable "
                           f"(server_ip {local_entry.get('server_ip') if isinstance(local_entry, dict) else None!r}, "
                           f"devices {list(_device_ids(local_entry))})")
    if role is not None:
        passed.append("local_matches_global")

    if ports is not None:
        if len(ports) != len(entries):
            reasons.append(f"NODE_PORTS has {len(ports)} ports but the global ranktable has {len(entries)} "
                           "prefill + decode instances")
        else:
            passed.append("node_ports_count")
            if own_index is not None and ports[own_index] != port:
                reasons.append(f"NODE_PORTS position {own_index} is {ports[own_index]} but this {role} instance "
                               f"(global ranktable entry {own_index}) listens on --port {port}: NODE_PORTS must "
                               "list prefill then decode ports in global ranktable order")
            elif role == "scheduler" and any(
                    p == port and e.get("server_ip") == by_id["0"][0].get("server_ip")
                    for p, (_, e) in zip(ports, entries)):
                reasons.append(f"NODE_PORTS names the scheduler's own port {port} on its own host")
            elif role is not None:
                passed.append("node_ports_position")
    if reasons:
        raise RanktableProblem(reasons)
    backends = tuple(Backend(r, str(e.get("server_ip")), p, _device_ids(e)) for (r, e), p in zip(entries, ports))
    return PdLayout(role=role, tp=tp, backends=backends, own_index=own_index,
                    scheduler_ip=str(by_id["0"][0].get("server_ip")), checks_passed=tuple(passed))
