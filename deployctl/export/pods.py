"""One deployctl container as a Kubernetes container, and a pod's spec (pure): the same image, command and env;
device resources instead of device paths; secrets as secretKeyRef; the weights from the cluster's volume."""

from __future__ import annotations

import re
from typing import Optional

from deployctl.export.expansion import kubelet_text, references
from deployctl.fronts import front_for_role
from deployctl.export.options import (CARDLESS_CPU, CARDLESS_MEMORY, CPU_PER_CARD, GPU_RESOURCE, MEMORY_GI_PER_CARD,
                                      ExportOptions)
from deployctl.plan.containers import Container, Mount
from deployctl.plan.contract import FILE_TARGETS
from deployctl.plan.probes import health_path
from deployctl.plan.rollout import DEFAULT_DRAIN_TIMEOUT
from deployctl.servers import flavour_of
from deployctl.servers.shutdown import stop_grace
from deployctl.spec.model import Instance, Spec
from deployctl.spec.startup import startup_budget

POD_IP = "POD_IP"
PERIOD_S = 10
K8S_GRACE_S = 30  # terminationGracePeriodSeconds' default
# The drain on update, as `up` drains (plan/actions.py Drain, facts/in_flight.py): a deleted pod leaves its
# Services' endpoints as it turns Terminating, at the same moment its preStop hook starts
# (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination); the hook gives kube-proxy and the
# front ENDPOINT_SETTLE_S to stop sending, then waits until the server runs and queues no request (vLLM's
# vllm:num_requests_running + vllm:num_requests_waiting on its own /metrics = 0), at most DRAIN_S (`up`'s
# --drain-timeout default). The kubelet counts the hook inside terminationGracePeriodSeconds, then sends SIGTERM:
# the grace is the settle, the drain, the server's own graceful stop (servers/shutdown.py) and a margin.
ENDPOINT_SETTLE_S = 5
DRAIN_S = int(DEFAULT_DRAIN_TIMEOUT)
GRACE_MARGIN_S = 15
# A deleted pod's requests end where its /metrics stops answering too (the server is gone): then the hook ends.
PRESTOP_SCRIPT = (
    "import os, re, sys, time, urllib.request\n"
    "url, settle, drain, gauges = sys.argv[1].format(**os.environ), float(sys.argv[2]), float(sys.argv[3]), "
    "sys.argv[4:]\n"
    "time.sleep(settle)\n"
    "line = re.compile('^(' + '|'.join(map(re.escape, gauges)) + r')[{ ]')\n"
    "end = time.monotonic() + drain\n"
    "while time.monotonic() < end:\n"
    "    try:\n"
    "        page = urllib.request.urlopen(url, timeout=2).read().decode()\n"
    "    except Exception:\n"
    "        break\n"
    "    if sum(float(l.split()[-1]) for l in page.splitlines() if line.match(l)) == 0:\n"
    "        break\n"
    "    time.sleep(1)\n"
)
# A start-up probe fails a container only after the server's own start-up deadline has passed: vLLM gives up
# waiting for its engines after VLLM_ENGINE_READY_TIMEOUT_S (vllm/envs.py; 600 s unless set) and says why in its
# log; the probe's budget is that (or `up`'s health budget) plus STARTUP_MARGIN_S for the API server
# to answer once the engines are up.
STARTUP_MARGIN_S = 60
ENGINE_READY_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
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
        front = front_for_role(instance.role)
        own = front.startup_budget_s() if front is not None else None
        budget = own if own is not None else startup_probe_budget(spec, container)
        out.update(_probes(health_path(spec, instance), port_name(local), budget,
                           flavour_of(spec).readiness_command(instance, tuple(command or container.command))))
        drain = pre_stop(spec, instance)
        if drain:
            out["lifecycle"] = {"preStop": {"exec": {"command": list(drain)}}}
    return out


def startup_probe_budget(spec: Spec, container: Container) -> int:
    """Seconds a server's start-up probe allows: its start-up deadline (the container's
    VLLM_ENGINE_READY_TIMEOUT_S where set, else `up`'s health budget) plus STARTUP_MARGIN_S."""
    budget = startup_budget(spec).seconds
    for var in container.env:
        if var.name == ENGINE_READY_ENV and str(var.value).isdigit():
            budget = max(budget, int(var.value))
    return budget + STARTUP_MARGIN_S


def pre_stop(spec: Spec, instance: Instance, host: str = "127.0.0.1") -> Optional[tuple[str, ...]]:
    """The preStop hook that drains the server `instance` (PRESTOP_SCRIPT) at `host` (`{VAR}`: from the pod's
    environment, a worker's leader), None for one without vLLM's request gauges on a /metrics (the proxy)."""
    flavour = flavour_of(spec)
    endpoint = flavour.metrics_endpoint(instance)
    gauges = tuple(g for g in (flavour.metrics.running, flavour.metrics.waiting) if g)
    if endpoint is None or not gauges:
        return None
    port, path = endpoint
    return ("python3", "-c", PRESTOP_SCRIPT, f"http://{host}:{port}{path}", str(ENDPOINT_SETTLE_S), str(DRAIN_S),
            *gauges)


def drain_grace(words) -> int:
    """terminationGracePeriodSeconds of a pod whose server drains: the hook's settle and drain, then the server's
    own graceful stop, and a margin."""
    return ENDPOINT_SETTLE_S + DRAIN_S + stop_grace(words, K8S_GRACE_S) + GRACE_MARGIN_S


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
    grace = max((drain_grace(c.command) if "lifecycle" in entry else stop_grace(c.command, K8S_GRACE_S)
                 for c, entry in containers), default=K8S_GRACE_S)
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
    for key, number in instance.own_ports[1:]:  # `grpc`, `metrics`: a port's name in the pod
        ports.append({"name": key[:-len("_port")], "containerPort": number, "protocol": "TCP"})
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
