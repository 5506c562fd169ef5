"""The `ranktable validate` document: one report per file, local files against their global, device IPs
against what the live hosts report (pure; the command reads the files and asks the hosts)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

from deployctl.ranktable.check import GLOBAL_KINDS, PD_LOCAL, check_local_against_globals

# path -> (CheckResult, the decoded document) of every file that could be read
Documents = Mapping[str, tuple[Any, Any]]


def file_report(path: str, kind: Optional[str], errors: list[tuple[str, str, str]]) -> dict:
    return {"file": path, "kind": kind, "valid": not errors, "errors": [error_entry(*e) for e in errors]}


def error_entry(json_path: str, rule: str, message: str) -> dict:
    return {"json_path": json_path, "message": message, "rule": rule}


def validation_document(reports: list[dict]) -> dict:
    return {"valid": all(r["valid"] for r in reports), "files": reports}


def check_locals(reports: list[dict], documents: Documents) -> None:
    """Each valid local file given with valid global files must equal its entry in them."""
    globals_ = [(p, d) for p, (r, d) in documents.items() if r.kind in GLOBAL_KINDS and r.valid]
    for report in reports:
        result, local = documents.get(report["file"], (None, None))
        if result is None or result.kind != PD_LOCAL or not result.valid:
            continue
        found = check_local_against_globals(local, globals_)
        report["errors"] += [error_entry(v.json_path, v.rule, v.message) for v in found]
        report["valid"] = not report["errors"]


def device_entries(document: Any) -> Iterator[tuple[str, Any, int, Any]]:
    """(json path, server_ip, device_id, device_ip) of every device in a P/D or HCCL ranktable."""
    if not isinstance(document, dict):
        return
    groups = document.get("server_group_list")
    lists = ([(f"server_group_list[{g}].", group.get("server_list") or []) for g, group in enumerate(groups)
              if isinstance(group, dict)] if isinstance(groups, list) else [("", document.get("server_list") or [])])
    for prefix, servers in lists:
        for s, server in enumerate(servers if isinstance(servers, list) else []):
            if not isinstance(server, dict):
                continue
            ip = server.get("server_ip") or server.get("server_id")
            for d, device in enumerate(server.get("device") or []):
                if isinstance(device, dict) and str(device.get("device_id", "")).isdigit():
                    yield (f"{prefix}server_list[{s}].device[{d}].device_ip", ip, int(device["device_id"]),
                           device.get("device_ip"))


def devices_named(documents: Documents, host_of_ip: Mapping[str, str]) -> dict[str, tuple[int, ...]]:
    """Host name -> the NPUs the files name on it (servers that are no host of the spec are left out)."""
    wanted: dict[str, set[int]] = {}
    for _, document in documents.values():
        for _, ip, device, _ in device_entries(document):
            if ip in host_of_ip:
                wanted.setdefault(host_of_ip[ip], set()).add(device)
    return {host: tuple(sorted(devices)) for host, devices in wanted.items()}


def check_against_live(reports: list[dict], documents: Documents, host_of_ip: Mapping[str, str],
                       labels: Mapping[str, str], live: Mapping[str, Mapping[int, str]], spec_name: str) -> None:
    """Each device_ip must be what `hccn_tool` reported (`live`) for that NPU on the host the file names."""
    for report in reports:
        _, document = documents.get(report["file"], (None, None))
        for path, ip, device, device_ip in device_entries(document):
            host = host_of_ip.get(ip)
            if host is None:
                report["errors"].append(error_entry(path, "against-hosts", f"server {ip} is not a host of {spec_name}"))
            elif live[host].get(device) != device_ip:
                report["errors"].append(error_entry(
                    path, "against-hosts",
                    f"{device_ip} but {labels[host]} reports {live[host].get(device)} for NPU {device}"))
        report["valid"] = not report["errors"]
