"""The exports the tests pin: every playbook x target (x NPU stack) that maps (with golden files), and those
refused."""

from __future__ import annotations

from pathlib import Path

from deployctl.export.options import ExportOptions
from deployctl.export.stacks import DEFAULT_STACK, STACK_NAMES

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "export"
GOLDEN = FIXTURES / "golden"
SECRET_VALUE = "hf_never_in_a_manifest_0123456789"
ENVIRON = {"HF_TOKEN": SECRET_VALUE}

# the seed's AscendCloud P/D playbook: an instance a whole 910B server, as MindCluster schedules them
ASCENDCLOUD_PD = "playbooks/disaggregated-2hosts-910b.yaml"
PD_PLAYBOOKS = ("playbooks/demo-pd.yaml", ASCENDCLOUD_PD, "playbooks/pd-1host-910b.yaml")

# spec (relative to the repository) -> the flags a user would pass, and the targets it maps to
MAPPED = {
    "playbooks/mixed-1host-910b.yaml": (
        dict(image="registry.example/deployctl/vllm-ascend:6.3.909", weights_hostpath="/data/models/qwen2-7b"),
        ("k8s", "lws", "kthena")),
    "playbooks/gpu-vllm.yaml": (dict(weights_pvc="qwen2-7b-weights"), ("k8s", "lws", "kthena")),
    "playbooks/gpu-triton.yaml": (dict(weights_pvc="opt-125m-weights"), ("k8s", "lws", "kthena")),
    "playbooks/sglang-gpu-mixed.yaml": (dict(weights_pvc="qwen2-7b-weights"), ("k8s", "lws", "kthena")),
    "playbooks/vllm-ascend-mixed-ep-1host.yaml": (dict(weights_pvc="qwen3-30b-weights"), ("k8s", "lws", "kthena")),
    "playbooks/vllm-ascend-mixed-2hosts-internal.yaml": (dict(weights_pvc="deepseek-v3-weights"), ("lws", "kthena")),
    "playbooks/vllm-ascend-pd-qwen3.yaml": (dict(weights_pvc="qwen3-235b-weights", nic="bond0"), ("lws", "kthena")),
    "tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml": (
        dict(weights_pvc="qwen3-30b-weights", secret="qwen3-tokens", namespace="serving"), ("k8s", "lws", "kthena")),
    # the seed's AscendCloud P/D flow on whole nodes: ascend-operator writes each instance's ranktable, an init step
    # merges them (export/pd_ranktables.py); a Deployment per instance, so k8s only
    ASCENDCLOUD_PD: (dict(weights_pvc="llama3-70b-weights"), ("k8s",)),
}

# playbook x target -> the spec path its one error names
REFUSED = {
    # the AscendCloud P/D playbooks on the default stack (mindcluster): LWS and Kthena pods get no ranktable from
    # ascend-operator; a Deployment does, but the bed's and the one-host playbook's instances ask for part of a node
    # (whole servers only; the seed's, ASCENDCLOUD_PD, runs on whole servers and maps)
    **{(p, t): "topology" for p in PD_PLAYBOOKS for t in ("lws", "kthena")},
    **{(p, "k8s"): "topology.prefill[0].devices" for p in PD_PLAYBOOKS if p != ASCENDCLOUD_PD},
    **{(p, t): "topology.front" for p in ("playbooks/mixed-router-910b.yaml", "playbooks/sglang-ascend-pd.yaml")
       for t in ("k8s", "lws", "kthena")},
    ("playbooks/vllm-ascend-mixed-2hosts-internal.yaml", "k8s"): "topology.groups[0].hosts",
    ("playbooks/vllm-ascend-pd-qwen3.yaml", "k8s"): "topology.decode[0].hosts",
}

# spec x target x stack refused on that stack only -> the spec path its one error names: a container per rank
# (dp_launch: external) where the stack does not run a host's ranks as one (mindcluster does: whole_nodes.py)
STACK_REFUSED = {
    **{("playbooks/vllm-ascend-pd-qwen3.yaml", "kthena", stack): "topology.decode[0].hosts"
       for stack in ("cce", "plain")},
    # part of a node (2 of 8 NPUs; 8 of 16): MindCluster schedules whole servers only (export/refusals.py _devices)
    **{("playbooks/mixed-1host-910b.yaml", t, "mindcluster"): "topology.instances[0].devices"
       for t in ("k8s", "lws", "kthena")},
    **{("tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml", t, "mindcluster"): "topology.prefill[0].dp"
       for t in ("k8s", "lws", "kthena")},
}
# nothing on cce or plain writes a pod's ranktable (servers/ascendcloud.py export_refusals)
STACK_REFUSED.update({(ASCENDCLOUD_PD, "k8s", stack): "topology" for stack in ("cce", "plain")})
# the stack a spec exports on where the tests name none: the default, or plain where the default refuses it
PART_OF_NODE = {spec for spec, _, stack in STACK_REFUSED if stack == DEFAULT_STACK}


def default_stack(spec: str) -> str:
    return "plain" if spec in PART_OF_NODE else DEFAULT_STACK


def mapped_cases() -> list[tuple[str, str]]:
    return [(spec, target) for spec, (_, targets) in MAPPED.items() for target in targets]


def stacked_cases() -> list[tuple[str, str, str]]:
    """Each mapped spec x target x NPU stack (a GPU spec's export is no stack's business: the default only)."""
    return [(spec, target, stack) for spec, target in mapped_cases()
            for stack in (STACK_NAMES if load(spec).platform == "ascend" else (DEFAULT_STACK,))
            if (spec, target, stack) not in STACK_REFUSED]


def options(spec: str, target: str, stack: str = None) -> ExportOptions:
    return ExportOptions(target=target, npu_stack=stack or default_stack(spec), **MAPPED[spec][0])


def golden_path(spec: str, target: str, stack: str = DEFAULT_STACK) -> Path:
    """golden/<stack>/<target>/<spec>.yaml (a GPU spec's under the default stack)."""
    return GOLDEN / stack / target / (Path(spec).stem + ".yaml")


def load(spec: str):
    from deployctl.spec.load import load_spec

    return load_spec(ROOT / spec, environ=ENVIRON)


def exported(spec: str, target: str, stack: str = None):
    from deployctl.export.render import export

    return export(load(spec), options(spec, target, stack))
