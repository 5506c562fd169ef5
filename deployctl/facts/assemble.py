"""Probe outputs -> HostFacts: pure, so gather.py only runs commands and the rules stay testable."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from deployctl.errors import FactParseError
from deployctl.facts.hccn_model import HccnDeviceFacts
from deployctl.facts.model import HostFacts
from deployctl.facts.probe import Probe

MISSING = 127  # the shell's "command not found"
# probe key -> HostFacts field for the probes that fill one field directly
FIELDS = {
    "arch": "arch", "os_release": "os_release", "npu_info": "npu", "npu_count": "npu_count", "version_info": "driver_files",
    "docker_version": "docker", "docker_info": "docker_info", "ip_forward": "ip_forward", "disk": "disk",
    "containers": "containers", "hccn_conf": "hccn_conf", "gpus": "gpus", "gpu_apps": "gpu_processes",
    "deployed": "deployed", "image": "image", "weights": "weights", "bound_addresses": "bound_addresses",
    "listening": "listening", "tuning": "tuning", "liveness": "liveness", "layout": "layout",
    "image_version": "image_version", "deployment_files": "deployment_files", "compile_cache": "compile_cache",
    "front_list": "front_list", "progress": "progress", "new_log_lines": "new_log_lines",
}
HCCN_FIELDS = {"hccn_ip": "ip", "hccn_link": "link", "hccn_tls": "tls"}


@dataclass(frozen=True)
class ProbeOutput:
    exit_code: int
    stdout: str
    stderr: str = ""


def _error_text(output: ProbeOutput) -> str:
    text = (output.stderr.strip() or output.stdout.strip()).splitlines()
    return text[-1] if text else f"exit {output.exit_code}"


def host_facts_from(results: Iterable[tuple[Probe, ProbeOutput]], *, disk_path: str | None = None) -> HostFacts:
    """Parse each output into its HostFacts field; exit 127 -> missing tool, other failures -> probe_errors."""
    values: dict = {"disk_path": disk_path}
    missing, errors, boards, pings, hccn = [], [], [], [], {}
    for probe, output in results:
        if output.exit_code == MISSING:
            missing.append(probe.tool)
            continue
        if output.exit_code != 0 and not probe.parse_failed_output:
            errors.append((probe.key.split(":")[0], _error_text(output)))
            continue
        try:
            parsed = probe.parse(output.stdout)
        except FactParseError as error:
            errors.append((probe.key.split(":")[0], error.message))
            continue
        _store(probe.key, parsed, output, values, boards, pings, hccn)
    if boards:
        values["boards"] = tuple(boards)
    if pings:
        values["hccn_pings"] = tuple(pings)
    if hccn:
        values["hccn"] = tuple(hccn[d] for d in sorted(hccn))
    return HostFacts(missing_tools=tuple(dict.fromkeys(missing)), probe_errors=tuple(errors), **values)


def _store(key: str, parsed, output: ProbeOutput, values: dict, boards: list, pings: list, hccn: dict) -> None:
    name, _, device = key.partition(":")
    if name in FIELDS:
        values[FIELDS[name]] = parsed
        if name == "docker_version" and output.exit_code != 0:
            values["docker_error"] = _error_text(output)
    elif name == "container_list" and not parsed:
        values.setdefault("containers", ())  # nothing running: no inspect needed
    elif name == "board":
        boards.append(parsed)
    elif name == "hccn_ping":
        pings.append(parsed)
    elif name in HCCN_FIELDS:
        device_id = int(device)
        current = hccn.get(device_id, HccnDeviceFacts(device_id))
        hccn[device_id] = replace(current, **{HCCN_FIELDS[name]: parsed})
