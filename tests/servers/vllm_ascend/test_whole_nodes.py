"""--npu-stack mindcluster runs a host's DP ranks as ONE container per pod (the device plugin in Volcano mode
accepts a container only when the pod's device annotation matches its request): vLLM's internal DP launch inside
the pod, --data-parallel-size-local = the ranks on the host. Other stacks keep a container per rank."""

from __future__ import annotations

import pytest

from deployctl.export.stacks import STACKS, pod_templates
from deployctl.servers.vllm_ascend.whole_nodes import needs_rewrite, one_container_per_pod
from tests.export.cases import exported, load, stacked_cases

QWEN3 = "playbooks/vllm-ascend-pd-qwen3.yaml"  # dp_launch: external; decode dp 8 x tp 4 over 2 hosts


def npu_containers(template: dict) -> list[dict]:
    return [c for c in template["spec"]["containers"] if c.get("resources", {}).get("limits")]


@pytest.mark.parametrize("spec,target,stack", [c for c in stacked_cases()
                                               if c[2] == "mindcluster" and load(c[0]).platform == "ascend"])
def test_mindcluster_gives_every_npu_pod_one_container(spec, target, stack):
    templates = [t for m in exported(spec, target, stack) for t, _ in pod_templates(m.body)]
    assert all(len(npu_containers(t)) <= 1 for t in templates)


@pytest.mark.parametrize("target", ("lws", "kthena"))
def test_an_external_launch_runs_a_hosts_ranks_in_one_server(target):
    bodies = [m.body for m in exported(QWEN3, target, "mindcluster")]
    templates = {t["metadata"]["labels"]["deployctl.instance"]: t for b in bodies for t, _ in pod_templates(b)}
    (leader,) = npu_containers(templates["qwen3-pd-decode0-node2"])
    argv = leader.get("command") or leader["args"]
    assert argv[argv.index("--data-parallel-size-local") + 1] == "4" and "--data-parallel-rank" not in argv
    assert leader["resources"]["limits"] == {"huawei.com/Ascend910": "16"}  # the node's 4 ranks x tp 4
    (worker,) = npu_containers(templates["qwen3-pd-decode0-worker"])
    script = (worker.get("command") or worker["args"])[-1]
    assert "--headless" in script and "--data-parallel-size-local 4 --data-parallel-start-rank" in script
    proxy = next(c for t in templates.values() for c in t["spec"]["containers"] if c["name"] == "proxy")
    argv = proxy.get("command") or proxy["args"]
    assert argv[argv.index("--decoder-ports") + 1:] == ["9100"]  # one API per group: its leader's


def test_other_stacks_keep_a_container_per_rank():
    body = next(m.body for m in exported(QWEN3, "lws", "plain") if m.name == "qwen3-pd-decode0")
    assert len(body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]) == 4


def test_only_an_external_launch_on_a_whole_node_stack_is_rewritten():
    spec = load(QWEN3)
    assert needs_rewrite(spec, STACKS["mindcluster"]) and not needs_rewrite(spec, STACKS["plain"])
    assert one_container_per_pod(spec, STACKS["cce"]) is spec
    internal = load("playbooks/vllm-ascend-mixed-2hosts-internal.yaml")
    assert one_container_per_pod(internal, STACKS["mindcluster"]) is internal
    rewritten = one_container_per_pod(spec, STACKS["mindcluster"])
    assert rewritten.upstream.dp_launch == "internal"
    servers = [i for i in rewritten.instances if i.server]
    assert [(i.name, len(i.devices), i.port) for i in servers] == [
        ("qwen3-pd-prefill0-node1", 16, 9100), ("qwen3-pd-decode0-node2", 16, 9100),
        ("qwen3-pd-decode0-node3", 16, None)]
    assert [i.index for i in servers] == [0, 0, 1]
