"""One deployctl container as a Kubernetes container, and a pod's spec (pure): the same image, command and env;
device resources instead of device paths; secrets as secretKeyRef; the weights from the cluster's volume."""

from __future__ import annotations

import re
from typing import Optional

from deployctl.export.expansion import kubelet_text, references
from deployctl.export.options import (CARDLESS_CPU, CARDLESS_MEMORY, CPU_PER_CARD, GPU_RESOURCE, MEMORY_GI_PER_CARD,
                                      PROXY_STARTUP_BUDGET_S, ExportOptions)
from deployctl.plan.containers import Container, Mount
from deployctl.plan.contract import FILE_TARGETS
from deployctl.plan.probes import health_path
from deployctl.servers import flavour_of
from deployctl.servers.shutdown import stop_grace
from deployctl.spec.model import Spec
from deployctl.spec.startup import startup_budget

POD_IP = "POD_IP"
PERIOD_S = 10
K8S_GRACE_S = 30  # terminationGracePeriodSeconds' default
SHM_VOLUME = "dshm"  # an in-memory /dev/shm of the size `up` gives docker's --shm-size (contract: shared memory)
_SHM_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
# The device plugin picks the NPUs and the runtime shows them as 0..n-1: a physical id list would be wrong.
DROPPED_ENV = ("ASCEND_RT_VISIBLE_DEVICES",)


def port_name(local: int) -> str:
    """`http`, or `http-1`... for the further ranks of one pod (names are unique per pod)."""
    return "http" if local == 0 else f"http-{local}"


def container_name(local: int) -> str:
    return "server" if local == 0 else f"server-{local}"


def k8s_container(spec: Spec, container: Container, options: ExportOptions, name: str, local: int = 0,
                  command: Optional[tuple[str, ...]] = None) -> dict:
    """The container's entry in a pod spec; `command` replaces the planned one (a worker's template)."""
    instance = container.instance
    # through the image's entrypoint where `up` runs it so (docker run without --entrypoint): args, not command
    key = "args" if container.image_entrypoint else "command"
    out: dict = {"name": name, "image": options.image or container.image,
                 key: [kubelet_text(word) for word in command or container.command]}
    env = _env(container, options)
    if env:
        out["env"] = env
    ports = _ports(spec, container, local)
    if ports:
        out["ports"] = ports
    out["resources"] = {"requests": requests(spec, container)}
    devices = _devices(spec, container, options)
    if devices:  # an extended resource is requested by its limit (the request defaults to it)
        out["resources"]["limits"] = devices
    mounts = [{"name": volume_name(spec, m), "mountPath": m.target, **({"readOnly": True} if m.read_only else {})}
              for m in container.mounts]
    if container.shm_size:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if mounts:
        out["volumeMounts"] = mounts
    if instance.port is not None:
        out.update(_probes(health_path(spec, instance), port_name(local),
                           PROXY_STARTUP_BUDGET_S if instance.role == "proxy" else startup_budget(spec).seconds,
                           flavour_of(spec).readiness_command(instance, tuple(command or container.command))))
    return out


def pod_spec(spec: Spec, containers: list[tuple[Container, dict]], options: ExportOptions) -> dict:
    """A pod spec from its containers (deployctl's and their Kubernetes entries); volumes named once."""
    volumes: dict[str, dict] = {}
    for container, _ in containers:
        for mount in container.mounts:
            volumes.setdefault(volume_name(spec, mount), _volume(spec, mount, container, options))
    shm = sum(shm_bytes(c.shm_size) for c, _ in containers if c.shm_size)
    if shm:  # one per pod, shared by its containers: as large as their own /dev/shm together
        volumes[SHM_VOLUME] = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": quantity(shm)}}
    out: dict = {"containers": [entry for _, entry in containers]}
    # The kubelet kills a pod's containers terminationGracePeriodSeconds (default 30) after SIGTERM
    # (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination): a server that drains longer
    # (its own --shutdown-timeout) gets as long.
    grace = max((stop_grace(c.command, K8S_GRACE_S) for c, _ in containers), default=K8S_GRACE_S)
    if grace > K8S_GRACE_S:
        out["terminationGracePeriodSeconds"] = grace
    if volumes:
        out["volumes"] = list(volumes.values())
    return out


def shm_bytes(size: str) -> int:
    """docker's --shm-size (`16g`, `512m`; k, m, g are powers of 1024) in bytes."""
    return int(size[:-1]) * _SHM_UNITS[size[-1].lower()]


def quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity in the largest binary unit that divides them (`16Gi`)."""
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def volume_name(spec: Spec, mount: Mount) -> str:
    if _is_weights(spec, mount):
        return "weights"
    if _is_repository(spec, mount):
        return "model-repository"
    return re.sub(r"[^a-z0-9]+", "-", mount.target.lower()).strip("-")[:63].strip("-")


def _is_weights(spec: Spec, mount: Mount) -> bool:
    return mount.source == spec.weights.dest and mount.target == spec.weights.dest


def _is_repository(spec: Spec, mount: Mount) -> bool:
    return mount.source == flavour_of(spec).repository_dir(spec)


def _volume(spec: Spec, mount: Mount, container: Container, options: ExportOptions) -> dict:
    name = volume_name(spec, mount)
    if _is_weights(spec, mount):
        if options.weights_pvc:
            return {"name": name, "persistentVolumeClaim": {"claimName": options.weights_pvc, "readOnly": True}}
        return {"name": name, "hostPath": {"path": options.weights_hostpath, "type": "Directory"}}
    if _is_repository(spec, mount):
        from deployctl.export.triton import repository_volume

        return repository_volume(spec, container.instance, name)
    return {"name": name, "hostPath": {"path": mount.source, "type": host_path_type(mount)}}


def host_path_type(mount: Mount) -> str:
    """File or Directory, so that a node without the driver's file or directory fails at the pod's start with
    the path named, not later in the server (kubernetes.io/docs/concepts/storage/volumes/#hostpath-volume-types).
    A writable directory (logs) is DirectoryOrCreate, as `docker run -v` would create it."""
    if mount.target in FILE_TARGETS:
        return "File"
    return "Directory" if mount.read_only else "DirectoryOrCreate"


def requests(spec: Spec, container: Container) -> dict:
    """The container's CPU and memory requests: its group's container.cpu/memory, else the spec's, else a
    default per card (options.CPU_PER_CARD, MEMORY_GI_PER_CARD); a container without cards the cardless ones."""
    instance = container.instance
    cards = len(instance.devices)
    if not cards:
        return {"cpu": CARDLESS_CPU, "memory": CARDLESS_MEMORY}
    return {"cpu": instance.cpu or spec.cpu or str(CPU_PER_CARD * cards),
            "memory": instance.memory or spec.memory or f"{MEMORY_GI_PER_CARD * cards}Gi"}


def _env(container: Container, options: ExportOptions) -> list[dict]:
    literal = [e for e in container.env if e.name not in DROPPED_ENV]
    out = []
    if any(references(e.value, POD_IP) for e in literal) or any(references(w, POD_IP) for w in container.command):
        # first: Kubernetes expands $(POD_IP) only from variables defined before the one that uses it
        out.append({"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    out += [{"name": e.name, "value": kubelet_text(e.value)} for e in literal]
    out += [{"name": e.name, "valueFrom": {"secretKeyRef": {"name": options.secret, "key": e.name}}}
            for e in container.secret_env]
    return out


def _ports(spec: Spec, container: Container, local: int) -> list[dict]:
    instance = container.instance
    if instance.port is None:
        return []
    ports = [{"name": port_name(local), "containerPort": instance.port, "protocol": "TCP"}]
    for name, number in (("grpc", instance.grpc_port), ("metrics", instance.metrics_port)):
        if number is not None:
            ports.append({"name": name, "containerPort": number, "protocol": "TCP"})
    return ports


def _devices(spec: Spec, container: Container, options: ExportOptions) -> dict:
    count = len(container.instance.devices)
    if not count:
        return {}
    return {GPU_RESOURCE if spec.platform == "gpu" else options.device_resource: str(count)}


def _probes(path: str, port: str, budget_s: int, readiness: Optional[tuple[str, ...]] = None) -> dict:
    """Start-up gets `up`'s health budget (model load: failureThreshold x periodSeconds covers it); after it,
    readiness and liveness ask the same path, or readiness runs the flavour's command (the proxy's backends)."""
    check = {"httpGet": {"path": path, "port": port}, "periodSeconds": PERIOD_S, "timeoutSeconds": 5}
    ready = check if readiness is None else {"exec": {"command": list(readiness)}, "periodSeconds": PERIOD_S,
                                             "timeoutSeconds": 5}
    return {
        "startupProbe": {**check, "failureThreshold": -(-budget_s // PERIOD_S)},
        "readinessProbe": {**ready, "failureThreshold": 3},
        "livenessProbe": {**check, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 3},
    }
