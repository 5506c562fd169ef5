"""The container of each instance: devices, mounts, env, labels, the server command, its digest.

Pure: `container_for(spec, instance, ...)` returns data and `docker_run(container)` the argv that starts it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.core import Secret
from deployctl.facts.hccn_tool import HCCN_TOOL_PATH as HCCN_TOOL  # mounted into the containers
from deployctl.spec.model import EnvVar, Instance, Spec

LABEL_DEPLOYMENT = "deployctl.deployment"
LABEL_ROLE = "deployctl.role"
LABEL_INSTANCE = "deployctl.instance"
LABEL_DIGEST = "deployctl.digest"
PREVIOUS_SUFFIX = ".previous"

# The vendor's P/D launcher inside the AscendCloud image (seed 001); the stand-in image has it too.
START_SERVERS = "/home/ma-user/AscendCloud/AscendCloud-LLM/llm_tools/PD_separate/start_servers.sh"
VLLM_OPENAI = ("python", "-m", "vllm.entrypoints.openai.api_server")
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


def ranktable_dir(spec: Spec) -> str:
    """Where a host keeps this deployment's ranktables (mounted read-only into the containers)."""
    return f"{spec.remote_state_dir}/ranktables"


def env_dir(spec: Spec) -> str:
    """Where the 0600 env files of secrets live on a host, one per container."""
    return f"{spec.remote_state_dir}/env"


def env_file_path(spec: Spec, container_name: str) -> str:
    return f"{env_dir(spec)}/{container_name}.env"


def serve_args(spec: Spec, instance: Instance) -> tuple[str, ...]:
    """The vLLM OpenAI-server arguments of one instance (the scheduler runs with the P/D TP)."""
    model = spec.model
    args = ["--model", spec.weights.dest or "/model", "--tensor-parallel-size", str(instance.tp)]
    if model.max_model_len is not None:
        args += ["--max-model-len", str(model.max_model_len)]
    if instance.max_num_seqs is not None:
        args += ["--max-num-seqs", str(instance.max_num_seqs)]
    if instance.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(instance.max_num_batched_tokens)]
    args += ["--host", "0.0.0.0", "--port", str(instance.port), "--served-model-name", model.served_name]
    if model.quantization:
        args += ["--quantization", model.quantization]
    if model.kv_cache_dtype:
        args += ["--kv-cache-dtype", model.kv_cache_dtype]
        if model.quantization_param_path:
            args += ["--quantization-param-path", model.quantization_param_path]
    return tuple(args) + tuple(instance.extra_args)


def server_command(spec: Spec, instance: Instance) -> tuple[str, ...]:
    if spec.server == "triton":
        from deployctl.plan.triton import tritonserver_command

        return tritonserver_command(spec, instance)
    if spec.mode == "disaggregated":
        return ("sh", START_SERVERS) + serve_args(spec, instance)
    return VLLM_OPENAI + serve_args(spec, instance)


def ascend_mounts(spec: Spec) -> tuple[Mount, ...]:
    """Runbook section 5, plus hccn.conf/hccn_tool and the ranktables for P/D; never /home/ma-user."""
    mounts = [
        Mount("/etc/localtime", "/etc/localtime"),
        Mount("/usr/local/Ascend/driver", "/usr/local/Ascend/driver"),
        Mount("/etc/ascend_install.info", "/etc/ascend_install.info"),
        Mount("/var/log/npu/", "/usr/slog", read_only=False),
        Mount("/usr/local/sbin/npu-smi", "/usr/local/sbin/npu-smi"),
        Mount("/sys/fs/cgroup", "/sys/fs/cgroup"),
    ]
    if spec.mode == "disaggregated":
        mounts += [
            Mount("/etc/hccn.conf", "/etc/hccn.conf"),
            Mount(HCCN_TOOL, "/usr/local/bin/hccn_tool"),
            Mount(ranktable_dir(spec), ranktable_dir(spec)),
        ]
    if spec.weights.dest:
        mounts.append(Mount(spec.weights.dest, spec.weights.dest))
    return tuple(mounts)


def ranktable_env(spec: Spec, instance: Instance, files: "RanktableFiles") -> tuple[EnvVar, ...]:
    """GLOBAL_RANK_TABLE_FILE_PATH, RANK_TABLE_FILE_PATH, NODE_PORTS, USE_OPENAI for a P/D instance."""
    directory = ranktable_dir(spec)
    values = (
        ("GLOBAL_RANK_TABLE_FILE_PATH", f"{directory}/{files.global_name}"),
        ("RANK_TABLE_FILE_PATH", f"{directory}/{files.local_names[instance.name]}"),
        ("NODE_PORTS", ",".join(str(p) for p in spec.node_ports)),
        ("USE_OPENAI", "1"),
    )
    return tuple(EnvVar(k, v, v) for k, v in values)


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


def container_for(spec: Spec, instance: Instance, ranktables: Optional[RanktableFiles] = None,
                  networks: Optional[Mapping] = None) -> Container:
    """The container that runs `instance` (`networks`: vllm-ascend's per-host address and NIC)."""
    if spec.upstream is not None:
        from deployctl.plan.upstream import upstream_container

        return upstream_container(spec, instance, networks)
    literal = tuple(e for e in spec.env if not e.is_secret)
    secret = tuple(e for e in spec.env if e.is_secret)
    gpus = None
    if spec.platform == "gpu":
        devices: tuple[str, ...] = ()
        gpus = "device=" + ",".join(str(d) for d in instance.devices)
        if len(instance.devices) > 1:
            # docker reads --gpus as CSV: unquoted, `device=0,1` is device 0 plus a count of 1, and the
            # daemon refuses "cannot set both Count and DeviceIDs". Docker's documented form quotes it.
            gpus = f'"{gpus}"'
        mounts = (Mount(spec.weights.dest, spec.weights.dest),) if spec.weights.dest else ()
        if spec.server == "triton":
            from deployctl.plan.triton import repository_dir

            mounts += (Mount(repository_dir(spec), repository_dir(spec)),)
    else:
        devices = tuple(f"/dev/davinci{d}" for d in instance.devices) + MANAGER_DEVICES
        mounts = ascend_mounts(spec)
    env = literal
    if spec.mode == "disaggregated" and ranktables is not None:
        env = ranktable_env(spec, instance, ranktables) + literal
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
        env=env,
        env_file=env_file_path(spec, instance.name) if secret else None,
        secret_env=secret,
        labels=labels,
        command=server_command(spec, instance),
        gpus=gpus,
        shm_size=(spec.shm_size or DEFAULT_SHM_SIZE) if instance.devices else None,
    )


def env_file_content(container: Container) -> bytes:
    """The --env-file body with the secret values revealed: only ever Put with mode 0600."""
    return b"".join(var.name.encode() + b"=" + _secret_bytes(var) + b"\n" for var in container.secret_env)


def container_digest(container: Container, image_id: str, ranktable_digest: str = "",
                     repository_digest: str = "") -> str:
    """sha256 over image ID, run arguments, env (secrets by hash), mounts, ranktable and model-repository content."""
    secret_hashes = [
        (v.name, hashlib.sha256(_secret_bytes(v)).hexdigest()) for v in container.secret_env
    ]
    document = {
        "image_id": image_id,
        "argv": list(_run_words(container)),
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
