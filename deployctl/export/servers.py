"""The containers of each pod, as `up` plans them, then as Kubernetes containers (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from deployctl.export.expansion import Expanded
from deployctl.export.gangs import Gang, Pod
from deployctl.export.options import ExportOptions
from deployctl.export.pods import container_name, k8s_container, pod_spec, pre_stop
from deployctl.export.ranks import GangEnv, worker_command
from deployctl.plan.containers import container_for
from deployctl.facts.listening import port_list
from deployctl.servers.vllm_ascend.upstream import HostNetwork, proxy_command
from deployctl.servers.vllm_ascend.groups import Server, kv_ports
from deployctl.spec.model import Instance, Spec

# A pod's own network namespace has the kernel's default ephemeral range (32768-60999), which holds the kv ports
# (36000 up on 16-NPU hosts). net.ipv4.ip_local_reserved_ports is on the kubelet's safe list from Kubernetes 1.27
# (kubernetes/kubernetes pkg/kubelet/sysctl/safe_sysctls.go, kernel >= 3.16), so every kubelet of the versions the
# export targets (1.31 and newer) allows it in a pod's securityContext without --allowed-unsafe-sysctls.
RESERVED_PORTS = "net.ipv4.ip_local_reserved_ports"
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
        entry = k8s_container(spec, container, options, container_name(local), local, command)
        if command is not None:  # a worker's ranks serve the leader's requests: it stops once the leader drained
            drain = pre_stop(spec, gang.leader.instances[0], "{" + gang_env.leader_address + "}")
            if drain:
                entry["lifecycle"] = {"preStop": {"exec": {"command": list(drain)}}}
        entries.append((container, entry))
    out = pod_spec(spec, entries, options)
    hosts = [pod.host] if pod.host_index == 0 or gang_env is None else [p.host for p in gang.pods[1:]]
    reserved = reserved_ports(gang, hosts)
    if reserved:
        out["securityContext"] = {"sysctls": [{"name": RESERVED_PORTS, "value": port_list(reserved)}]}
    return out


def reserved_ports(gang: Gang, hosts: list[str]) -> tuple[int, ...]:
    """The kv ports the pod's servers bind (a worker template: every worker host's), as `up` reserves them on a
    host (plan/reserve_ports.py): out of the ephemeral range, where an outgoing connection could take one first."""
    group = gang.group
    if group is None or not group.binds_kv_ports:
        return ()
    return tuple(sorted({port for host in hosts for port in kv_ports(group, host)}))


def proxy_pod(spec: Spec, proxy: Instance, options: ExportOptions, address: Callable[[Server], str]) -> dict:
    """The vllm-ascend proxy, its lists naming each API server as the cluster reaches it."""
    nets = networks(spec, options)
    container = container_for(spec, proxy, None, nets)
    container = replace(container, command=proxy_command(spec, proxy, nets, address))
    return pod_spec(spec, [(container, k8s_container(spec, container, options, "proxy"))], options)
