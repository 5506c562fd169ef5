"""P/D ranktables as frozen dataclasses, and their exact vendor JSON form (`json.dump(obj, f, indent=4)`).

Values are kept as the strings the files hold, so a merge reproduces its inputs byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

VERSION = "1.0"
STATUS = "completed"
SCHEDULER, PREFILL, DECODE = "0", "1", "2"
GROUP_IDS = (SCHEDULER, PREFILL, DECODE)
ROLE_OF_GROUP = {SCHEDULER: "scheduler", PREFILL: "prefill", DECODE: "decode"}
MERGED_FILE_NAME = "global_ranktable_merge.json"


@dataclass(frozen=True)
class Device:
    device_id: str  # physical NPU id
    device_ip: str  # the NPU's RoCE address (hccn_tool -i N -ip -g)
    rank_id: str  # logical, 0..tp-1 within its instance


@dataclass(frozen=True)
class Server:
    """One `server_list` entry: an instance (with devices) or the scheduler (devices None)."""

    server_id: str
    server_ip: str
    devices: Optional[tuple[Device, ...]] = None

    @property
    def device_ids(self) -> tuple[str, ...]:
        return tuple(d.device_id for d in self.devices or ())


@dataclass(frozen=True)
class Group:
    group_id: str  # "0" scheduler, "1" prefill, "2" decode
    servers: tuple[Server, ...]


@dataclass(frozen=True)
class Ranktable:
    """A P/D global ranktable: complete (groups 0, 1, 2) or one host's part of it."""

    groups: tuple[Group, ...]
    version: str = VERSION
    status: str = STATUS

    def group(self, group_id: str) -> tuple[Server, ...]:
        """The servers of a group; () when the group is absent."""
        return next((g.servers for g in self.groups if g.group_id == group_id), ())


@dataclass(frozen=True)
class LocalRanktable:
    """One instance's local file (or the scheduler's `_host` file): its global entry, group "0"."""

    server: Server
    version: str = VERSION
    status: str = STATUS


def global_file_name(host_ip: str) -> str:
    return f"global_ranktable_{host_ip}.json"


def local_file_name(host_ip: str, device_ids: tuple) -> str:
    """`local_ranktable_<ip>_45.json`: the vendor joins the ids without a separator."""
    return f"local_ranktable_{host_ip}_{''.join(str(d) for d in device_ids)}.json"


def host_file_name(host_ip: str) -> str:
    """The scheduler's local file."""
    return f"local_ranktable_{host_ip}_host.json"


def server_document(server: Server) -> dict[str, Any]:
    out: dict[str, Any] = {"server_id": server.server_id, "server_ip": server.server_ip}
    if server.devices is not None:
        out["device"] = [
            {"device_id": d.device_id, "device_ip": d.device_ip, "rank_id": d.rank_id} for d in server.devices
        ]
    return out


def ranktable_document(table: Ranktable) -> dict[str, Any]:
    """The global file as the vendor tool builds it (key order matters for byte equality)."""
    return {
        "version": table.version,
        "status": table.status,
        "server_group_list": [
            {
                "group_id": group.group_id,
                "server_count": str(len(group.servers)),
                "server_list": [server_document(s) for s in group.servers],
            }
            for group in table.groups
        ],
    }


def local_document(local: LocalRanktable) -> dict[str, Any]:
    return {
        "version": local.version,
        "status": local.status,
        "group_id": "0",
        "server_count": "1",
        "server_list": [server_document(local.server)],
    }


def to_json(table: Ranktable | LocalRanktable) -> str:
    """Byte-compatible with the vendor's `json.dump(obj, f, indent=4)`: no trailing newline."""
    document = local_document(table) if isinstance(table, LocalRanktable) else ranktable_document(table)
    return json.dumps(document, indent=4)


def server_from_document(entry: dict[str, Any]) -> Server:
    devices = entry.get("device")
    return Server(
        server_id=entry["server_id"],
        server_ip=entry["server_ip"],
        devices=None
        if devices is None
        else tuple(Device(d["device_id"], d["device_ip"], d["rank_id"]) for d in devices),
    )


def ranktable_from_document(document: dict[str, Any]) -> Ranktable:
    """A checked global (or per-host global) document as a Ranktable; check_ranktable it first."""
    return Ranktable(
        groups=tuple(
            Group(g["group_id"], tuple(server_from_document(s) for s in g.get("server_list", ())))
            for g in document["server_group_list"]
        ),
        version=document.get("version", VERSION),
        status=document.get("status", STATUS),
    )
