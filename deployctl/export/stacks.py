"""The NPU stacks a cluster runs, and what each asks of an NPU pod (pure): the device plugin's resource name,
the scheduler, the labels and the node selector its documentation requires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

STACK_NAMES = ("mindcluster", "cce", "plain")
# What the README recommends: MindCluster (Ascend Device Plugin + Ascend Docker Runtime + Volcano) is the stack
# Ascend documents for serving vLLM on Kubernetes (mind-cluster docs/zh/usage/vllm_best_practice.md).
DEFAULT_STACK = "mindcluster"
ASCEND_RESOURCE = "huawei.com/Ascend910"


@dataclass(frozen=True)
class NpuStack:
    name: str
    resource: str  # the extended resource a container's NPU count is asked in
    scheduler: Optional[str] = None  # the pod's schedulerName (None: the cluster's default scheduler)
    labels: tuple[tuple[str, str], ...] = ()  # on every NPU pod
    accelerator_types: tuple[tuple[int, str], ...] = ()  # cards a node has -> its accelerator-type node label
    whole_nodes: bool = False  # one NPU container per pod: a host's DP ranks as one internal-launch server
    about: str = ""  # the documentation the rules come from

    def node_selector(self, cards: int) -> dict:
        """The nodeSelector an NPU pod needs on this stack for nodes of `cards` NPUs ({} where none)."""
        found = dict(self.accelerator_types)
        return {"accelerator-type": found[cards]} if cards in found else {}

    def refuses(self, cards: int) -> bool:
        """True when the stack places pods by accelerator-type and knows no node type of `cards` NPUs."""
        return bool(self.accelerator_types) and cards not in dict(self.accelerator_types)


STACKS = {
    # MindCluster with Volcano (mind-cluster docs/zh/usage/vllm_best_practice.md, "YAML参数说明"):
    # schedulerName volcano; `ring-controller.atlas: ascend-910b` names the product to the Volcano NPU plugin
    # (A2 and A3 alike); the node label accelerator-type is module-910b-8 on an Atlas 800I A2 (8 NPUs) and
    # module-a3-16 on an Atlas 800I A3 (16): without it the plugin takes its old 8-NPU handler and a 16-NPU pod is
    # never placed. The Ascend Device Plugin's resource is huawei.com/Ascend910 (mind-cluster
    # component/ascend-device-plugin; vllm-ascend docs/source/user_guide/deployment_guide/using_volcano_kthena.md).
    # One NPU container per pod: in Volcano mode the device plugin accepts a container only when the pod's
    # annotation device list matches that container's request (mind-cluster
    # component/ascend-device-plugin/pkg/server/plugin.go), and the vLLM guide schedules whole nodes; so a host's
    # DP ranks run as one `vllm serve` (internal DP launch, export/whole_nodes.py).
    "mindcluster": NpuStack(
        "mindcluster", ASCEND_RESOURCE, scheduler="volcano", labels=(("ring-controller.atlas", "ascend-910b"),),
        accelerator_types=((8, "module-910b-8"), (16, "module-a3-16")), whole_nodes=True,
        about="MindCluster: Ascend Device Plugin (Volcano mode), Ascend Docker Runtime, Volcano"),
    # Huawei Cloud CCE with the CCE AI Suite (Ascend NPU) add-on: it names the 910 resource huawei.com/ascend-1980
    # (vllm-ascend using_volcano_kthena.md; support.huaweicloud.com usermanual-cce cce_10_0239, NPU scheduling
    # cce_10_0346: a pod asking for it is placed on NPU nodes only, so no selector); the default scheduler.
    "cce": NpuStack("cce", "huawei.com/ascend-1980",
                    about="Huawei Cloud CCE: CCE AI Suite (Ascend NPU) add-on"),
    # The Ascend Device Plugin without Volcano (volcanoType=false): Kubernetes' own scheduler counts the
    # resource; no labels or selector.
    "plain": NpuStack("plain", ASCEND_RESOURCE, about="the Ascend Device Plugin with the default scheduler"),
}


def stack_name(value: str) -> Optional[str]:
    """None when `value` is a stack deployctl knows, else what is wrong (flags.py's rule)."""
    return None if value in STACKS else f"is not an NPU stack: use one of {', '.join(STACK_NAMES)}"


def pod_templates(body: dict) -> Iterator[tuple[dict, bool]]:
    """Each pod template of an exported object, and whether its own spec may name a scheduler (a ModelServing
    names Volcano once for all its roles)."""
    kind = body["kind"]
    if kind == "Deployment":
        yield body["spec"]["template"], True
    elif kind == "LeaderWorkerSet":
        shape = body["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in shape:
                yield shape[key], True
    elif kind == "ModelServing":
        for role in body["spec"]["template"]["roles"]:
            for key in ("entryTemplate", "workerTemplate"):
                if key in role:
                    yield role[key], False


def place(bodies: list[dict], stack: NpuStack, resource: str, cards: int) -> None:
    """Give every pod template that asks for `resource` the stack's scheduler, labels and node selector (in
    place; a pod without NPUs, the proxy, keeps the default scheduler and no selector)."""
    for body in bodies:
        for template, own_scheduler in pod_templates(body):
            pod = template["spec"]
            if not any(resource in c.get("resources", {}).get("limits", {}) for c in pod["containers"]):
                continue
            template.setdefault("metadata", {}).setdefault("labels", {}).update(dict(stack.labels))
            if stack.scheduler and own_scheduler:
                pod["schedulerName"] = stack.scheduler
            selector = stack.node_selector(cards)
            if selector:
                pod["nodeSelector"] = selector
