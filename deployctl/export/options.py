"""What an export needs beyond the spec: the target, and the cluster-side names the spec cannot know."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deployctl.export.stacks import DEFAULT_STACK, STACKS, NpuStack

TARGETS = ("k8s", "lws", "kthena")
GPU_RESOURCE = "nvidia.com/gpu"
# Requests when the spec writes no container.cpu / container.memory: a pod with none is BestEffort, the first the
# kubelet evicts under node pressure (kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction).
# Per card, so that a full 910B node (8 cards, 192 cores, 1.5 TiB) or A3 node (16) still fits beside the system's
# reserve: 4 CPUs and 32Gi a card; vllm-ascend's own LWS template caps memory at 512Gi for a whole node
# (tests/e2e/nightly/multi_node/scripts/lws.yaml.jinja2). A proxy or scheduler (no cards): 1 CPU, 2Gi.
CPU_PER_CARD = 4
MEMORY_GI_PER_CARD = 32
CARDLESS_CPU = "1"
CARDLESS_MEMORY = "2Gi"


@dataclass(frozen=True)
class ExportOptions:
    target: str  # k8s | lws | kthena
    namespace: Optional[str] = None
    weights_pvc: Optional[str] = None  # the PersistentVolumeClaim holding weights.dest's content
    weights_hostpath: Optional[str] = None  # or the directory on every node that holds it
    secret: Optional[str] = None  # the Secret whose keys are the spec's ${VAR} env names
    nic: str = "eth0"  # the pod's interface for GLOO/TP/HCCL_SOCKET_IFNAME (no host facts at export time)
    image: Optional[str] = None  # the pushed image, when the spec builds its own (image.build)
    npu_resource: Optional[str] = None  # --npu-resource: over the stack's resource name
    npu_stack: str = DEFAULT_STACK  # --npu-stack: mindcluster | cce | plain (stacks.py)
    node_type: Optional[str] = None  # --node-type: the nodes' accelerator-type label (stacks.NODE_TYPES)

    @property
    def stack(self) -> NpuStack:
        return STACKS[self.npu_stack]

    @property
    def device_resource(self) -> str:
        """The resource an NPU count is asked in: --npu-resource, else the stack's."""
        return self.npu_resource or self.stack.resource
