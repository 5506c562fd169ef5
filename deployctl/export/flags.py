"""The export flags that become Kubernetes names, paths or values, each checked against the rule of what it
becomes (pure): a bad one is refused before anything is rendered or written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from deployctl.errors import FlagError
from deployctl.export import k8s_names
from deployctl.export.options import ExportOptions
from deployctl.export.stacks import node_type_name, stack_name
from deployctl.spec.show import quoted

# (flag, ExportOptions field, the rule of what it becomes in the manifests)
RULES: tuple[tuple[str, str, Callable[[str], Optional[str]]], ...] = (
    ("--namespace", "namespace", k8s_names.dns1123_label),  # metadata.namespace: ValidateNamespaceName
    ("--weights-pvc", "weights_pvc", k8s_names.dns1123_subdomain),  # claimName: ValidatePersistentVolumeName
    ("--weights-hostpath", "weights_hostpath", k8s_names.absolute_path),  # hostPath.path
    ("--secret", "secret", k8s_names.dns1123_subdomain),  # secretKeyRef.name: ValidateSecretName
    ("--nic", "nic", k8s_names.interface_name),  # GLOO/TP/HCCL_SOCKET_IFNAME: an interface in the pod
    ("--image", "image", k8s_names.image),  # containers[].image
    ("--npu-resource", "npu_resource", k8s_names.extended_resource_name),  # resources.limits key
    ("--npu-stack", "npu_stack", stack_name),  # the scheduler, labels, selector and resource of NPU pods
    ("--node-type", "node_type", node_type_name),  # the accelerator-type nodeSelector (and SuperPoD annotations)
)


@dataclass(frozen=True)
class BadFlag:
    """One flag whose value breaks the rule of what it becomes."""

    flag: str
    value: str
    rule: str

    def render(self) -> str:
        return f"{self.flag} {quoted(self.value)}: {self.rule}"

    def to_json(self) -> dict:
        return {"flag": self.flag, "value": self.value, "message": self.rule}


def bad_flags(options: ExportOptions) -> list[BadFlag]:
    """Every flag given whose value Kubernetes (or the pod's kernel, or Docker) would refuse, in flag order."""
    out = []
    for flag, field, rule in RULES:
        value = getattr(options, field)
        if value is None:
            continue
        broken = rule(value)
        if not broken and field == "node_type" and not options.stack.accelerator_types:
            broken = (f"places NPU pods by MindCluster's node label accelerator-type, which --npu-stack "
                      f"{options.npu_stack} does not use: export with --npu-stack mindcluster, or leave it out")
        if broken:
            out.append(BadFlag(flag, value, broken))
    return out


def check_flags(options: ExportOptions) -> None:
    """Raise FlagError (exit 2) naming every bad flag, its value and the rule it breaks."""
    found = bad_flags(options)
    if found:
        raise FlagError(found, f"cannot export to {options.target}")
