"""One container as data (what servers/ builds: Mount, Container, RanktableFiles) and the neutral helpers that
fill it; no flavour is asked here, so a flavour may import this at module level (plan/containers.py asks them)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.spec.model import EnvVar, Instance, Spec

LABEL_DEPLOYMENT = "deployctl.deployment"
LABEL_ROLE = "deployctl.role"
LABEL_INSTANCE = "deployctl.instance"
LABEL_DIGEST = "deployctl.digest"
PREVIOUS_SUFFIX = ".previous"

MANAGER_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# /dev/shm of a server without a profile (AscendCloud vLLM, vLLM and Triton on GPU): never Docker's 64m, which
# vLLM's shared-memory message queues outgrow (vLLM's docs run its image with --ipc=host or a large --shm-size;
# Triton's with --shm-size=1g). tmpfs: a limit, not a reservation. vllm-ascend's comes from its server profile.
DEFAULT_SHM_SIZE = "16g"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True

    def volume(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class Container:
    """Everything that makes one instance's container what it is (before the image ID is known)."""

    name: str
    instance: Instance
    image: str
    devices: tuple[str, ...]
    mounts: tuple[Mount, ...]
    env: tuple[EnvVar, ...]  # literal values, passed as --env; secrets live in env_file
    env_file: Optional[str]  # host path of the 0600 file holding the secret values, if any
    secret_env: tuple[EnvVar, ...]
    labels: tuple[tuple[str, str], ...]  # without the digest
    command: tuple[str, ...]
    gpus: Optional[str] = None  # `--gpus device=0` / `--gpus "device=0,1"` on GPU hosts
    shm_size: Optional[str] = None  # --shm-size (every server container has one; the proxy and scheduler none)
    image_entrypoint: bool = False  # True: the command runs through the image's entrypoint (no --entrypoint)
    # The command as the container's identity (its digest) sees it, where it differs: a front that changes its
    # list of servers at run time starts with the spec's list, yet a changed list is applied to it while it
    # serves (plan/front.py), so the list is no part of what it is.
    identity_command: Optional[tuple[str, ...]] = None


def ranktable_dir(spec: Spec) -> str:
    """Where a host keeps this deployment's ranktables (mounted read-only into the containers)."""
    return f"{spec.remote_state_dir}/ranktables"


def env_dir(spec: Spec) -> str:
    """Where the 0600 env files of secrets live on a host, one per container."""
    return f"{spec.remote_state_dir}/env"


def env_file_path(spec: Spec, container_name: str) -> str:
    return f"{env_dir(spec)}/{container_name}.env"


@dataclass(frozen=True)
class RanktableFiles:
    """Names and contents of the rendered ranktables, as the containers will read them."""

    global_name: str
    local_names: Mapping[str, str]  # container name -> local file name
    contents: Mapping[str, bytes]  # file name -> bytes (global + every local)

    def digest_for(self, container_name: str) -> str:
        """Hash of exactly the files one container reads."""
        names = (self.global_name, self.local_names[container_name])
        return hashlib.sha256(b"\0".join(self.contents[n] for n in names)).hexdigest()


def instance_container(spec: Spec, instance: Instance, *, devices: tuple[str, ...], mounts: tuple[Mount, ...],
                       command: tuple[str, ...], env: tuple[EnvVar, ...] = (), gpus: Optional[str] = None) -> Container:
    """A server container with the spec's env (literal values after the flavour's `env`; secrets through the env
    file), the deployment's labels and its /dev/shm."""
    literal = tuple(e for e in spec.env if not e.is_secret)
    secret = tuple(e for e in spec.env if e.is_secret)
    labels = (
        (LABEL_DEPLOYMENT, spec.name),
        (LABEL_ROLE, instance.role),
        (LABEL_INSTANCE, instance.name),
    )
    return Container(
        name=instance.name,
        instance=instance,
        image=spec.image.name or "",
        devices=devices,
        mounts=mounts,
        env=env + literal,
        env_file=env_file_path(spec, instance.name) if secret else None,
        secret_env=secret,
        labels=labels,
        command=command,
        gpus=gpus,
        shm_size=(spec.shm_size or DEFAULT_SHM_SIZE) if instance.devices else None,
    )
