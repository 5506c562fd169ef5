"""Parsers for `docker version|info|ps --format '{{json .}}'` and `docker inspect`."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from deployctl.errors import FactParseError
from deployctl.facts.model import ContainerDevices, ContainerSummary, DockerInfo, DockerVersion
from deployctl.facts.text import first_line, numbered_lines

_DAVINCI = re.compile(r"^/dev/davinci(\d+)$")


def _json(text: str, tool: str, expected: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        lines = text.splitlines() or [""]
        number = min(getattr(error, "lineno", 1), len(lines))
        raise FactParseError(tool, number, lines[number - 1], expected) from None


def _object(text: str, tool: str) -> dict:
    number, line = first_line(text)
    value = _json(text, tool, "one JSON object") if text.strip() else None
    if not isinstance(value, dict):
        raise FactParseError(tool, number, line, "one JSON object")
    return value


def parse_docker_version(text: str) -> DockerVersion:
    """`docker version --format '{{json .}}'`. With the daemon down docker exits 1, prints the client
    part with `"Server":null` on stdout and the reason on stderr: then `server` is None."""
    tool = "docker version"
    value = _object(text, tool)
    client, server = value.get("Client"), value.get("Server")
    if not isinstance(client, dict) or not isinstance(server, (dict, type(None))):
        number, line = first_line(text)
        raise FactParseError(tool, number, line, "'{\"Client\": {...}, \"Server\": {...}|null}'")
    server = server or {}
    return DockerVersion(
        client=client.get("Version"),
        server=server.get("Version"),
        client_api=client.get("ApiVersion"),
        server_api=server.get("ApiVersion"),
    )


def parse_docker_info(text: str) -> DockerInfo:
    """`docker info --format '{{json .}}'`: server version, arch, IPv4Forwarding, runtimes (unknown keys ignored)."""
    value = _object(text, "docker info")
    forwarding = value.get("IPv4Forwarding")
    return DockerInfo(
        server_version=value.get("ServerVersion"),
        architecture=value.get("Architecture"),
        ip_forwarding=forwarding if isinstance(forwarding, bool) else None,
        runtimes=tuple(sorted(value.get("Runtimes") or {})),
        default_runtime=value.get("DefaultRuntime"),
        docker_root_dir=value.get("DockerRootDir"),
    )


def _label_string(labels: str) -> tuple[tuple[str, str], ...]:
    """`docker ps` prints labels as `k=v,k2=v2` (a value holding a comma is ambiguous: use inspect)."""
    pairs = []
    for item in filter(None, labels.split(",")):
        key, _, value = item.partition("=")
        pairs.append((key, value))
    return tuple(sorted(pairs))


def parse_docker_ps(text: str) -> tuple[ContainerSummary, ...]:
    """`docker ps --format '{{json .}}'`: one JSON object per line (no output: no containers)."""
    tool = "docker ps"
    out = []
    for number, line in numbered_lines(text):
        value = _json(line, tool, "one JSON object per line")
        if not isinstance(value, dict) or "ID" not in value or "Names" not in value:
            raise FactParseError(tool, number, line, "a JSON object with ID and Names")
        out.append(ContainerSummary(
            id=value["ID"],
            name=value["Names"],
            image=value.get("Image", ""),
            state=value.get("State"),
            status=value.get("Status", ""),
            labels=_label_string(value.get("Labels", "")),
        ))
    return tuple(out)


def _visible_devices(env: list) -> tuple[int, ...]:
    """Ascend Docker Runtime hands NPUs over via `ASCEND_VISIBLE_DEVICES=0-3,6` instead of --device."""
    ids: set[int] = set()
    for item in env or ():
        key, _, value = str(item).partition("=")
        if key != "ASCEND_VISIBLE_DEVICES":
            continue
        for part in filter(None, value.replace(" ", "").split(",")):
            low, dash, high = part.partition("-")
            if low.isdigit() and (not dash or high.isdigit()):
                ids.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(ids))


def _gpu_ids(requests: Optional[list]) -> tuple[str, ...]:
    ids: list[str] = []
    for request in requests or ():
        if ["gpu"] not in (request.get("Capabilities") or []):
            continue
        if request.get("Count") == -1:
            ids.append("all")
        ids.extend(request.get("DeviceIDs") or ())
    return tuple(ids)


def _container_devices(item: dict) -> ContainerDevices:
    host_config, config = item.get("HostConfig") or {}, item.get("Config") or {}
    paths = tuple(d.get("PathOnHost", "") for d in host_config.get("Devices") or ())
    npus = {int(m.group(1)) for m in map(_DAVINCI.match, paths) if m}
    npus.update(_visible_devices(config.get("Env")))
    state = item.get("State") or {}
    return ContainerDevices(
        id=item["Id"],
        name=str(item.get("Name", "")).lstrip("/"),
        running=bool(state.get("Running")),
        labels=tuple(sorted((config.get("Labels") or {}).items())),
        device_paths=paths,
        npu_ids=tuple(sorted(npus)),
        gpu_ids=_gpu_ids(host_config.get("DeviceRequests")),
        state=str(state.get("Status", "unknown")),
        exit_code=int(state.get("ExitCode") or 0),
        image_id=str(item.get("Image", "")),
        image=str(config.get("Image", "")),
        started_at=_started(state.get("StartedAt")),
    )


def _started(stamp) -> Optional[float]:
    """docker's State.StartedAt (RFC 3339, ns; `0001-01-01T00:00:00Z` for a container never started)."""
    from deployctl.facts.docker_logs import stamp_seconds

    seconds = stamp_seconds(stamp) if isinstance(stamp, str) else None
    return seconds if seconds is not None and seconds > 0 else None


def parse_docker_inspect(text: str) -> tuple[ContainerDevices, ...]:
    """`docker inspect ID...`: a JSON array; the devices (/dev/davinciN, GPU requests) and labels of each."""
    tool = "docker inspect"
    value = _json(text, tool, "a JSON array of containers")
    if not isinstance(value, list) or not all(isinstance(item, dict) and "Id" in item for item in value):
        number, line = first_line(text)
        raise FactParseError(tool, number, line, "a JSON array of container objects with Id")
    return tuple(_container_devices(item) for item in value)
