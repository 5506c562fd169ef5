"""Metadata, labels and Services shared by every target (pure); labels are deployctl's own."""

from __future__ import annotations

from typing import Optional

from deployctl.export.gang_types import Gang, Pod
from deployctl.export.options import ExportOptions
from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_INSTANCE, LABEL_ROLE
from deployctl.spec.model import Instance, Spec


def metadata(name: str, labels: dict, options: ExportOptions) -> dict:
    out: dict = {"name": name}
    if options.namespace:
        out["namespace"] = options.namespace
    out["labels"] = labels
    return out


def labels(spec: Spec, role: Optional[str] = None, instance: Optional[str] = None) -> dict:
    out = {LABEL_DEPLOYMENT: spec.name}
    if role:
        out[LABEL_ROLE] = role
    if instance:
        out[LABEL_INSTANCE] = instance
    return out


def pod_labels(spec: Spec, gang: Gang, pod: Pod) -> dict:
    """A worker template serves every worker host, so it cannot name one: `<gang>-worker`; the controller's
    worker-index label tells them apart."""
    return labels(spec, gang.role, pod.name if pod.host_index == 0 else f"{gang.name}-worker")


def template(spec: Spec, gang: Gang, pod: Pod, pod_spec: dict) -> dict:
    return {"metadata": {"labels": pod_labels(spec, gang, pod)}, "spec": pod_spec}


def service(name: str, selector: dict, ports: list[dict], options: ExportOptions, spec: Spec,
            role: Optional[str] = None) -> dict:
    # targetPort by name: a pod without that port (a headless DP worker) is no endpoint of the Service
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name, labels(spec, role), options),
            "spec": {"selector": selector, "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
                for p in ports]}}


def container_ports(pod_spec: dict) -> list[dict]:
    return [port for c in pod_spec["containers"] for port in c.get("ports", ())]


def endpoint_service(spec: Spec, front: Optional[Instance], first: tuple[Gang, dict], options: ExportOptions) -> dict:
    """The public endpoint, named after the deployment: the proxy, or every mixed instance behind one Service."""
    if front is not None:
        ports = [{"name": "http", "containerPort": front.port}]
        return service(spec.name, labels(spec, front.role), ports, options, spec)
    gang, leader_spec = first
    return service(spec.name, labels(spec, gang.role), container_ports(leader_spec), options, spec)


ROLLING = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def deployment(spec: Spec, name: str, pod_labels_: dict, pod_spec: dict, options: ExportOptions) -> dict:
    """One pod that Kubernetes keeps running. An update surges: the new pod starts beside the old one, which is
    drained and stopped only once the new one is ready (maxUnavailable 0), so no request is dropped; where the
    cluster has no free node for the new pod it waits Pending while the old one serves on (`kubectl rollout
    status` says so). Recreate would stop every instance of the deployment at once."""
    selector = {k: pod_labels_[k] for k in (LABEL_DEPLOYMENT, LABEL_INSTANCE)}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": metadata(name, labels(spec, pod_labels_.get(LABEL_ROLE), name), options),
            "spec": {"replicas": 1, "strategy": ROLLING, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": pod_labels_}, "spec": pod_spec}}}
