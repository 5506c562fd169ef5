"""Containers on a host, from `docker inspect` JSON: state, labels, image and the devices they hold."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.errors import FactParseError

TOOL = "docker inspect"


@dataclass(frozen=True)
class ContainerFact:
    id: str
    name: str
    state: str  # running | exited | created | restarting | paused | dead
    exit_code: int
    image_id: str
    image: str  # the name it was started from
    labels: Mapping[str, str]
    devices: tuple[str, ...]  # host paths passed with --device
    gpus: tuple[str, ...] = ()  # device ids from --gpus

    @property
    def running(self) -> bool:
        return self.state in ("running", "restarting")

    def label(self, key: str) -> Optional[str]:
        return self.labels.get(key)


def parse_docker_inspect(text: str) -> tuple[ContainerFact, ...]:
    """Parse the JSON list `docker inspect ID...` prints (an empty text or `[]` is no container)."""
    if not text.strip():
        return ()
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        line = text.splitlines()[exc.lineno - 1] if text.splitlines() else ""
        raise FactParseError(TOOL, exc.lineno, line, "a JSON list of containers") from None
    if not isinstance(items, list):
        raise FactParseError(TOOL, 1, text[:80], "a JSON list of containers")
    return tuple(_container(item) for item in items)


def _container(item: dict) -> ContainerFact:
    try:
        state = item.get("State") or {}
        config = item.get("Config") or {}
        host_config = item.get("HostConfig") or {}
        devices = tuple(d.get("PathOnHost", "") for d in host_config.get("Devices") or ())
        gpus = tuple(
            gpu
            for request in host_config.get("DeviceRequests") or ()
            for gpu in request.get("DeviceIDs") or ()
        )
        return ContainerFact(
            id=item["Id"],
            name=item["Name"].lstrip("/"),
            state=state.get("Status", "unknown"),
            exit_code=int(state.get("ExitCode") or 0),
            image_id=item.get("Image", ""),
            image=config.get("Image", ""),
            labels=dict(config.get("Labels") or {}),
            devices=devices,
            gpus=gpus,
        )
    except (KeyError, TypeError, AttributeError, ValueError):
        raise FactParseError(TOOL, 1, str(item)[:80], "a container with Id, Name, State, Config") from None
