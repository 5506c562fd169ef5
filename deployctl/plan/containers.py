"""The container of each instance: devices, mounts, env, labels, the server command, its digest.

Pure: `container_for(spec, instance, ...)` returns data and `docker_run(container)` the argv that starts it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Mapping, Optional

from deployctl.core import Secret
from deployctl.plan.container_types import (  # noqa: F401 (where plan/, execute/ and export/ import them from)
    DEFAULT_SHM_SIZE, LABEL_DEPLOYMENT, LABEL_DIGEST, LABEL_INSTANCE, LABEL_ROLE, MANAGER_DEVICES, PREVIOUS_SUFFIX,
    Container, Mount, RanktableFiles, env_dir, env_file_path, instance_container, ranktable_dir,
)
from deployctl.spec.model import EnvVar, Instance, Spec


def container_for(spec: Spec, instance: Instance, ranktables: Optional[RanktableFiles] = None,
                  networks: Optional[Mapping] = None) -> Container:
    """The container that runs `instance`, as its server flavour shapes it (`networks`: each host's address and
    NIC, for the flavours that read them)."""
    from deployctl.fronts import front_for_role
    from deployctl.servers import flavour_of

    front = front_for_role(instance.role)
    if front is not None:  # a front on an image of its own (vLLM's router fronts any OpenAI server the same way)
        from deployctl.plan.front import reach

        own = front.container(spec, instance, reach(spec, networks))
        if own is not None:
            return own
    return flavour_of(spec).container(spec, instance, ranktables, networks)


def env_file_content(container: Container) -> bytes:
    """The --env-file body with the secret values revealed: only ever Put with mode 0600."""
    return b"".join(var.name.encode() + b"=" + _secret_bytes(var) + b"\n" for var in container.secret_env)


def container_digest(container: Container, image_id: str, ranktable_digest: str = "",
                     repository_digest: str = "") -> str:
    """sha256 over image ID, run arguments, env (secrets by hash), mounts, ranktable and model-repository content."""
    secret_hashes = [
        (v.name, hashlib.sha256(_secret_bytes(v)).hexdigest()) for v in container.secret_env
    ]
    identity = replace(container, command=container.identity_command) if container.identity_command else container
    document = {
        "image_id": image_id,
        "argv": list(_run_words(identity)),
        "env": [(e.name, e.display) for e in container.env],
        "secret_env": secret_hashes,
        "mounts": [m.volume() for m in container.mounts],
        "ranktables": ranktable_digest,
    }
    if repository_digest:  # only Triton containers read one; Ascend digests stay as they were
        document["triton_repository"] = repository_digest
    blob = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def _secret_bytes(var: EnvVar) -> bytes:
    value = var.value.reveal() if isinstance(var.value, Secret) else var.value
    return value.encode() if isinstance(value, str) else value


def _run_words(container: Container) -> tuple[str, ...]:
    words = ["--name", container.name, "--net=host", "--init"]
    if container.shm_size:
        words += ["--shm-size", container.shm_size]
    for key, value in container.labels:
        words += ["--label", f"{key}={value}"]
    for device in container.devices:
        words += ["--device", device]
    if container.gpus:
        words += ["--gpus", container.gpus]
    for mount in container.mounts:
        words += ["--volume", mount.volume()]
    for var in container.env:
        words += ["--env", f"{var.name}={var.value}"]
    if container.env_file:
        words += ["--env-file", container.env_file]
    if container.image_entrypoint:  # the image's own entrypoint and environment run the command
        return tuple(words) + (container.image,) + container.command
    # The server's first word replaces the image's ENTRYPOINT (vllm/vllm-openai has one), so the command runs
    # the same on every image.
    words += ["--entrypoint", container.command[0]]
    return tuple(words) + (container.image,) + container.command[1:]


def docker_run(container: Container, digest: str) -> tuple[str, ...]:
    """`docker run --detach ...` for a container, its digest label included."""
    return ("docker", "run", "--detach", "--label", f"{LABEL_DIGEST}={digest}") + _run_words(container)
