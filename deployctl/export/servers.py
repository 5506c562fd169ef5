"""The containers of each pod, as `up` plans them, then as Kubernetes containers (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from deployctl.export.expansion import Expanded
from deployctl.export.gangs import Gang, Pod
from deployctl.export.options import ExportOptions
from deployctl.export.pods import container_name, k8s_container, pod_spec
from deployctl.export.ranks import GangEnv, worker_command
from deployctl.plan.containers import container_for
from deployctl.plan.upstream import HostNetwork, proxy_command
from deployctl.spec.dp_groups import Server
from deployctl.spec.model import Instance, Spec

# HCCL_IF_IP and a single pod's DP master: the pod's own IP, from the downward API (the kubelet expands it)
POD_ADDRESS = Expanded("$(POD_IP)")


def networks(spec: Spec, options: ExportOptions) -> dict[str, HostNetwork]:
    """What `up` reads on each host (its address, the NIC holding it), as a pod knows it."""
    return {host.name: HostNetwork(POD_ADDRESS, options.nic) for host in spec.hosts}


def server_pod(spec: Spec, gang: Gang, pod: Pod, options: ExportOptions, gang_env: Optional[GangEnv]) -> dict:
    """The pod spec of one pod of a gang; a worker's (host index > 0) is the template every worker shares."""
    nets = networks(spec, options)
    entries = []
    for local, instance in enumerate(pod.instances):
        container = container_for(spec, instance, None, nets)
        command = None
        if pod.host_index > 0 and gang_env is not None:
            command = worker_command(container.command, instance, gang_env)
        entries.append((container, k8s_container(spec, container, options, container_name(local), local, command)))
    return pod_spec(spec, entries, options)


def proxy_pod(spec: Spec, proxy: Instance, options: ExportOptions, address: Callable[[Server], str]) -> dict:
    """The vllm-ascend proxy, its lists naming each API server as the cluster reaches it."""
    nets = networks(spec, options)
    container = container_for(spec, proxy, None, nets)
    container = replace(container, command=proxy_command(spec, proxy, nets, address))
    return pod_spec(spec, [(container, k8s_container(spec, container, options, "proxy"))], options)
