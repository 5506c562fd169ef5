"""The NPU stacks a cluster runs, and what each asks of an NPU pod (pure): the device plugin's resource name,
the scheduler, the labels and the node selector its documentation requires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

STACK_NAMES = ("mindcluster", "cce", "plain")
# What the README recommends: MindCluster (Ascend Device Plugin + Ascend Docker Runtime + Volcano) is the stack
# Ascend documents for serving vLLM on Kubernetes (mind-cluster docs/en/scheduling/usage/vllm_best_practice/
# 01_deploying_vllm_inference_job.md; in Chinese docs/zh/scheduling/04_usage/08_vllm_best_practice/, the pages that
# replaced the single vllm_best_practice page under docs/zh/usage when the docs were reorganized, mind-cluster
# commit 7e9260f5).
DEFAULT_STACK = "mindcluster"
ASCEND_RESOURCE = "huawei.com/Ascend910"


@dataclass(frozen=True)
class NpuStack:
    name: str
    resource: str  # the extended resource a container's NPU count is asked in
    scheduler: Optional[str] = None  # the pod's schedulerName (None: the cluster's default scheduler)
    labels: tuple[tuple[str, str], ...] = ()  # on every NPU pod
    accelerator_types: tuple[tuple[int, str], ...] = ()  # cards a node has -> its accelerator-type (the default)
    whole_nodes: bool = False  # one NPU container per pod: a host's DP ranks as one internal-launch server
    whole_servers: bool = False  # an NPU pod asks for every NPU of its node (MindCluster's vLLM guide)
    about: str = ""  # the documentation the rules come from

    def node_type(self, cards: int, chosen: Optional[str] = None) -> Optional["NodeType"]:
        """The node type NPU pods go to: --node-type where given, else the default for `cards` (None: the stack
        places by no node label, or knows no default for that count)."""
        if not self.accelerator_types:
            return None
        if chosen is not None:
            return NODE_TYPES[chosen]
        found = dict(self.accelerator_types)
        return NODE_TYPES[found[cards]] if cards in found else None

    def node_selector(self, cards: int, chosen: Optional[str] = None) -> dict:
        """The nodeSelector an NPU pod needs on this stack for nodes of `cards` NPUs ({} where none)."""
        found = self.node_type(cards, chosen)
        return {ACCELERATOR_TYPE: found.label} if found else {}

    def refuses(self, cards: int) -> bool:
        """True when the stack places pods by accelerator-type and knows no node type of `cards` NPUs."""
        return bool(self.accelerator_types) and cards not in dict(self.accelerator_types)

ACCELERATOR_TYPE = "accelerator-type"
SP_BLOCK = "sp-block"
SCHEDULE_POLICY = "huawei.com/schedule_policy"
# MindCluster's guide sets ASCEND_VISIBLE_DEVICES from the pod's device annotation (named like the resource), which
# Ascend Docker Runtime reads to mount the NPUs Volcano chose; a container without NPUs says `void`, so the runtime
# mounts none (mind-cluster docs/en/scheduling/usage/vllm_best_practice/01_deploying_vllm_inference_job.md, "YAML
# Parameter Description": env[name==ASCEND_VISIBLE_DEVICES].valueFrom.fieldRef.fieldPath
# metadata.annotations['huawei.com/Ascend910']; docs/en/scheduling/usage/containerization/
# 02_usage_on_the_docker_client.md: "void or leave it empty" when no NPU is needed;
# component/ascend-docker-runtime/runtime/process/process.go: `void` mounts nothing).
VISIBLE_DEVICES = "ASCEND_VISIBLE_DEVICES"
NO_DEVICES = "void"


@dataclass(frozen=True)
class NodeType:
    """One value of MindCluster's node label accelerator-type: the NPUs such a node has, the SuperPoD schedule
    policy where it is a SuperPoD node, and why deployctl cannot serve vLLM on it (None: it can)."""

    label: str
    cards: Optional[int]  # None: the label does not fix it (a server of PCIe cards)
    hardware: str
    superpod_policy: Optional[str] = None  # huawei.com/schedule_policy of a SuperPoD node (with sp-block)
    unsupported: Optional[str] = None

    @property
    def superpod(self) -> bool:
        return self.superpod_policy is not None


_A5 = ("an Ascend 950 node: its device plugin names the NPUs huawei.com/npu with accelerator=huawei-npu, and "
       "MindCluster's vLLM guide documents Atlas 800I A2 and A3 SuperPoD servers only")
_A1 = "an Ascend 910 (first generation) node, which vllm-ascend does not run on (it needs Atlas A2 or A3)"
_CARD = ("a server of PCIe cards, whose NPU count the label does not fix; MindCluster's vLLM guide schedules whole "
         "Atlas 800I A2 (8 NPUs) and A3 SuperPoD (16) servers only")
# Every accelerator-type value MindCluster documents (mind-cluster docs/en/scheduling/api/k8s.md, table 4 "Node
# labels used by cluster scheduling components"; {xxx} there is "910"), with its NPUs per node from Ascend-for-Volcano
# (mind-cluster component/ascend-for-volcano/common/util/constants.go: the accelerator types and the "value of
# schedule_policy annotation" list, chipX-nodeN = N NPUs a node; internal/npu/factory.go: the A3 SuperPoD handlers
# take 16 and 8 NPUs a node) and the hardware each names (docs/en/scheduling/developer_guide/installation_deployment/
# manual_installation/01_preparing_for_installation.md, the node label table). A SuperPoD node's pod carries
# huawei.com/schedule_policy (chip2-node16-sp / chip2-node8-sp, component/ascend-common/api/consts.go) and sp-block,
# the NPUs of one instance (docs/en/scheduling/usage/vllm_best_practice/01_deploying_vllm_inference_job.md: sp-block
# a multiple of the node's NPUs, the instance's NPUs a multiple of it; read from the pod's annotations,
# component/ascend-for-volcano/common/util/type.go SuperPodAnnoKey).
NODE_TYPES = {t.label: t for t in (
    NodeType("module-910b-8", 8, "Atlas 800I A2 / 800T A2 server, Atlas 900 A2 PoD"),
    NodeType("module-910b-16", 16, "Atlas 200T/200I A2 Box16"),
    NodeType("module-a3-16", 16, "Atlas 800I A3 / 800T A3 SuperPoD server, A200T A3 Box8"),
    NodeType("module-a3-16-super-pod", 16, "Atlas 900 A3 SuperPoD", superpod_policy="chip2-node16-sp"),
    NodeType("module-a3-8-super-pod", 8, "Atlas 9000 A3 SuperPoD", superpod_policy="chip2-node8-sp"),
    NodeType("card-910b-2", None, "a server of Atlas 300T A2 cards", unsupported=_CARD),
    NodeType("card-910b-infer", None, "a server of Atlas 300I A2 cards", unsupported=_CARD),
    NodeType("module", 8, "Atlas 800 training server (9000/9010)", unsupported=_A1),
    NodeType("half", 4, "Atlas 800 training server, half of its NPUs", unsupported=_A1),
    NodeType("card", None, "a server of Atlas 300T training cards", unsupported=_A1),
    NodeType("350-Atlas-8", 8, "Atlas 350 (8 cards)", unsupported=_A5),
    NodeType("350-Atlas-16", 16, "Atlas 350 (16 cards)", unsupported=_A5),
    NodeType("350-Atlas-4p-8", 8, "Atlas 350 4P (8)", unsupported=_A5),
    NodeType("350-Atlas-4p-16", 16, "Atlas 350 4P (16)", unsupported=_A5),
    NodeType("850-Atlas-8p-8", 8, "Atlas 850 8P", unsupported=_A5),
    NodeType("850-SuperPod-Atlas-8", 8, "Atlas 850 SuperPoD", superpod_policy="chip8-node8-sp", unsupported=_A5),
    NodeType("950-SuperPod-Atlas-8", 8, "Atlas 950 SuperPoD", superpod_policy="chip8-node8-ra64-sp",
             unsupported=_A5),
)}
NODE_TYPE_NAMES = tuple(NODE_TYPES)


STACKS = {
    # MindCluster with Volcano (mind-cluster docs/en/scheduling/usage/vllm_best_practice/
    # 01_deploying_vllm_inference_job.md, "YAML Parameter Description"): schedulerName volcano; the pod label
    # `ring-controller.atlas: ascend-910b` names the product to the Volcano NPU plugin, A2 and A3 alike
    # (component/ascend-for-volcano/common/util/type.go JobKindKey, constants.go JobKind910BValue); the node label
    # accelerator-type says the node type (NODE_TYPES; --node-type, else module-910b-8 for 8 NPUs a node and
    # module-a3-16 for 16): without it the plugin takes its old 8-NPU handler and a 16-NPU pod is never placed.
    # The Ascend Device Plugin's resource is huawei.com/Ascend910 (mind-cluster
    # component/ascend-device-plugin; vllm-ascend docs/source/user_guide/deployment_guide/using_volcano_kthena.md).
    # One NPU container per pod: in Volcano mode the device plugin accepts a container only when the pod's
    # annotation device list matches that container's request (mind-cluster
    # component/ascend-device-plugin/pkg/server/plugin.go), and the vLLM guide schedules whole nodes; so a host's
    # DP ranks run as one `vllm serve` (internal DP launch, servers/vllm_ascend/whole_nodes.py). Whole servers: the
    # guide's huawei.com/Ascend910 "only full-server scheduling is supported" (the whole-server rule of export --check).
    "mindcluster": NpuStack(
        "mindcluster", ASCEND_RESOURCE, scheduler="volcano", labels=(("ring-controller.atlas", "ascend-910b"),),
        accelerator_types=((8, "module-910b-8"), (16, "module-a3-16")), whole_nodes=True, whole_servers=True,
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


def node_type_name(value: str) -> Optional[str]:
    """None when `value` is an accelerator-type MindCluster documents, else what is wrong (flags.py's rule)."""
    return None if value in NODE_TYPES else (f"is not a node type MindCluster documents (accelerator-type): use one "
                                             f"of {', '.join(NODE_TYPE_NAMES)}")


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


def gang_size(body: dict) -> int:
    """The pods that start together in an exported object: an LWS group, a ModelServing role's entry and workers
    (the largest role: sp-block is per instance), a Deployment's one pod."""
    if body["kind"] == "LeaderWorkerSet":
        return body["spec"]["leaderWorkerTemplate"]["size"]
    if body["kind"] == "ModelServing":
        return max(1 + role.get("workerReplicas", 0) for role in body["spec"]["template"]["roles"])
    return 1


def _role_sizes(body: dict) -> Iterator[int]:
    """Each pod template's gang size, in pod_templates' order."""
    if body["kind"] == "ModelServing":
        for role in body["spec"]["template"]["roles"]:
            for key in ("entryTemplate", "workerTemplate"):
                if key in role:
                    yield 1 + role.get("workerReplicas", 0)
    else:
        while True:
            yield gang_size(body)


def npu_count(container: dict, resource: str) -> int:
    return int(container.get("resources", {}).get("limits", {}).get(resource, 0))


def place(bodies: list[dict], stack: NpuStack, resource: str, cards: int, node_type: Optional[str] = None) -> None:
    """Give every pod template that asks for `resource` the stack's scheduler, labels, node selector and (on a
    SuperPoD node type) SuperPoD annotations, in place; a pod without NPUs, the proxy, keeps the default scheduler
    and no selector. On MindCluster every container learns its NPUs from the device annotation, or `void`."""
    chosen = stack.node_type(cards, node_type)
    for body in bodies:
        for (template, own_scheduler), size in zip(pod_templates(body), _role_sizes(body)):
            pod = template["spec"]
            asks = [npu_count(c, resource) for c in pod["containers"]]
            if stack.name == "mindcluster":
                for container, count in zip(pod["containers"], asks):
                    _visible_devices(container, resource if count else None)
            if not any(asks):
                continue
            metadata = template.setdefault("metadata", {})
            metadata.setdefault("labels", {}).update(dict(stack.labels))
            if stack.scheduler and own_scheduler:
                pod["schedulerName"] = stack.scheduler
            if chosen is not None:
                pod["nodeSelector"] = {ACCELERATOR_TYPE: chosen.label}
                if chosen.superpod:
                    metadata.setdefault("annotations", {}).update({
                        SCHEDULE_POLICY: chosen.superpod_policy, SP_BLOCK: str(size * chosen.cards)})


def _visible_devices(container: dict, resource: Optional[str]) -> None:
    """ASCEND_VISIBLE_DEVICES last in the container's env (it refers to no other): the pod's device annotation, or
    `void`."""
    env = [e for e in container.get("env", []) if e["name"] != VISIBLE_DEVICES]
    entry = ({"name": VISIBLE_DEVICES, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{resource}']"}}}
             if resource else {"name": VISIBLE_DEVICES, "value": NO_DEVICES})
    container["env"] = [*env, entry]
