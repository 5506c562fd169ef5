"""The three targets (pure): plain Kubernetes, LeaderWorkerSet and Kthena ModelServing, each a list of objects."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from deployctl.export.gangs import Gang, Pod, gangs, proxy
from deployctl.export.objects import (
    container_ports, deployment, endpoint_service, labels, metadata, pod_labels, service, template,
)
from deployctl.export.options import ExportOptions
from deployctl.export.ranks import KTHENA, LWS
from deployctl.export.servers import proxy_pod, server_pod
from deployctl.servers.vllm_ascend.groups import Server
from deployctl.servers import flavour_of
from deployctl.spec.model import Spec

LWS_API = "leaderworkerset.x-k8s.io/v1"
# As a Deployment's (objects.ROLLING): a new group starts beside the old one, which drains once the new one is
# ready (the CRD's defaults, maxUnavailable 1 and maxSurge 0, take the only group down first: the LWS CRD schema,
# rollingUpdateConfiguration; kubernetes-sigs/lws site/content/en/docs/concepts/leaderworkerset/rollout-strategy).
LWS_ROLLING = {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 1}}
KTHENA_API = "workload.serving.volcano.sh/v1alpha1"


def k8s(spec: Spec, options: ExportOptions) -> list[dict]:
    """A Deployment per instance (every gang is one pod here: refusals.py saw to it), Services in front."""
    from deployctl.export import pd_ranktables

    if pd_ranktables.applies(spec, options):  # the AscendCloud P/D flow: the cluster writes its ranktables
        return pd_ranktables.build(spec, options)
    served = [(gang, gang.leader, server_pod(spec, gang, gang.leader, options, None)) for gang in gangs(spec)]
    out = _config_maps(spec, options)
    out += [deployment(spec, pod.name, pod_labels(spec, gang, pod), pod_spec, options)
            for gang, pod, pod_spec in served]
    return out + _front(spec, options, served, _by_pod_service(spec))


def lws(spec: Spec, options: ExportOptions) -> list[dict]:
    """A LeaderWorkerSet per gang: size = its hosts, the leader serving the API, one template for the workers."""
    out, served = _config_maps(spec, options), []
    for gang in gangs(spec):
        leader_spec = server_pod(spec, gang, gang.leader, options, LWS)
        served.append((gang, gang.leader, leader_spec))
        shape: dict = {"size": len(gang.pods), "restartPolicy": "RecreateGroupOnPodRestart"}
        if len(gang.pods) > 1:
            worker = gang.pods[1]
            shape["leaderTemplate"] = template(spec, gang, gang.leader, leader_spec)
            shape["workerTemplate"] = template(spec, gang, worker, server_pod(spec, gang, worker, options, LWS))
        else:  # without a leader template the one pod runs the worker template
            shape["workerTemplate"] = template(spec, gang, gang.leader, leader_spec)
        out.append({"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
                    "metadata": metadata(gang.name, labels(spec, gang.role), options),
                    "spec": {"replicas": 1, "leaderWorkerTemplate": shape, "rolloutStrategy": LWS_ROLLING}})
    return out + _front(spec, options, served, _lws_address(spec), backends=False)


def kthena(spec: Spec, options: ExportOptions) -> list[dict]:
    """One ModelServing: a role per gang (prefill, decode; numbered where a role has several), entry + workers."""
    all_gangs = gangs(spec)
    per_role = Counter(g.role for g in all_gangs)
    numbers: Counter = Counter()
    roles, served = [], []
    for gang in all_gangs:
        name = gang.role if per_role[gang.role] == 1 else f"{gang.role}{numbers[gang.role]}"
        numbers[gang.role] += 1
        entry_spec = server_pod(spec, gang, gang.leader, options, KTHENA)
        served.append((gang, gang.leader, entry_spec))
        role = {"name": name, "replicas": 1, "entryTemplate": template(spec, gang, gang.leader, entry_spec),
                "workerReplicas": len(gang.pods) - 1}
        if len(gang.pods) > 1:
            worker = gang.pods[1]
            role["workerTemplate"] = template(spec, gang, worker, server_pod(spec, gang, worker, options, KTHENA))
        roles.append(role)
    serving = {"apiVersion": KTHENA_API, "kind": "ModelServing",
               "metadata": metadata(spec.name, labels(spec), options),
               "spec": {"schedulerName": "volcano", "replicas": 1, "template": {"roles": roles}}}
    return _config_maps(spec, options) + [serving] + _front(spec, options, served, _by_pod_service(spec))


def _front(spec: Spec, options: ExportOptions, served: list, address: Callable[[Server], str],
           backends: bool = True) -> list[dict]:
    """The proxy (a Deployment on every target), a Service per API pod it lists, and the endpoint Service."""
    front, out = proxy(spec), []
    if front is not None:
        out.append(deployment(spec, front.name, labels(spec, front.role, front.name),
                              proxy_pod(spec, front, options, address), options))
        if backends:
            out += [service(pod.name, labels(spec, instance=pod.name), container_ports(pod_spec), options, spec,
                            gang.role) for gang, pod, pod_spec in served if container_ports(pod_spec)]
    first_gang, _, first_spec = served[0]
    return out + [endpoint_service(spec, front, (first_gang, first_spec), options)]


def _pods(spec: Spec) -> dict[Server, tuple[Gang, Pod]]:
    return {i.server: (gang, pod) for gang in gangs(spec) for pod in gang.pods for i in pod.instances if i.server}


def _by_pod_service(spec: Spec) -> Callable[[Server], str]:
    """Each API server through the Service named after its pod (k8s, Kthena: no stable pod names to use)."""
    pods = _pods(spec)
    return lambda server: pods[server][1].name


def _lws_address(spec: Spec) -> Callable[[Server], str]:
    """LWS names pods `<lws>-<replica>` (leader) and `<lws>-<replica>-<worker>`, each resolvable under the
    headless Service it creates with the LWS's name."""
    pods = _pods(spec)

    def address(server: Server) -> str:
        gang, pod = pods[server]
        name = f"{gang.name}-0" + (f"-{pod.host_index}" if pod.host_index else "")
        return f"{name}.{gang.name}"
    return address


def _config_maps(spec: Spec, options: ExportOptions) -> list[dict]:
    if flavour_of(spec).repository_dir(spec) is None:  # no files `up` would write for its servers to read
        return []
    from deployctl.export.triton import repository_config_map, repository_name

    return [repository_config_map(spec, i, metadata(repository_name(i), labels(spec, i.role, i.name), options))
            for gang in gangs(spec) for pod in gang.pods for i in pod.instances]


BUILDERS = {"k8s": k8s, "lws": lws, "kthena": kthena}
