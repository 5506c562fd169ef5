"""Triton's model repository, which `up` writes on the host, as a ConfigMap mounted where the host's would be."""

from __future__ import annotations

import re

from deployctl.servers.triton.repository import repository_dir, repository_files
from deployctl.spec.model import Instance, Spec


def repository_name(instance: Instance) -> str:
    return f"{instance.name}-repository"


def repository_data(spec: Spec, instance: Instance) -> dict[str, tuple[str, str]]:
    """ConfigMap key -> (path inside the repository, text); keys allow only [-._a-zA-Z0-9]."""
    root = repository_dir(spec) + "/"
    out = {}
    for path, content in sorted(repository_files(spec, instance).items()):
        relative = path[len(root):] if path.startswith(root) else path.lstrip("/")
        out[re.sub(r"[^-._a-zA-Z0-9]", "_", relative)] = (relative, content.decode())
    return out


def repository_volume(spec: Spec, instance: Instance, name: str) -> dict:
    items = [{"key": key, "path": relative} for key, (relative, _) in repository_data(spec, instance).items()]
    return {"name": name, "configMap": {"name": repository_name(instance), "items": items}}


def repository_config_map(spec: Spec, instance: Instance, metadata: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": {key: text for key, (_, text) in repository_data(spec, instance).items()}}
