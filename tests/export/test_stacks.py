"""--npu-stack: each stack's rules, read from every pod template of every Ascend export (the scheduler, the
labels, the node selector and the resource name its documentation asks for)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deployctl.errors import ExportError, FlagError
from deployctl.export.options import ExportOptions
from deployctl.export.render import export
from deployctl.export.stacks import DEFAULT_STACK, STACK_NAMES, pod_templates
from deployctl.spec.load import load_spec_text
from tests.export.cases import ENVIRON, MAPPED, ROOT, load, options, stacked_cases

ASCEND = [case for case in stacked_cases() if load(case[0]).platform == "ascend"]
EXPECTED = {  # stack -> resource, scheduler (k8s, lws), labels, accelerator-type by cards
    "mindcluster": ("huawei.com/Ascend910", "volcano", {"ring-controller.atlas": "ascend-910b"},
                    {8: "module-910b-8", 16: "module-a3-16"}),
    "cce": ("huawei.com/ascend-1980", None, {}, {}),
    "plain": ("huawei.com/Ascend910", None, {}, {}),
}


def test_the_default_is_mindcluster():
    assert DEFAULT_STACK == "mindcluster" and ExportOptions(target="k8s").npu_stack == "mindcluster"
    assert set(STACK_NAMES) == set(EXPECTED)


@pytest.mark.parametrize("spec,target,stack", ASCEND)
def test_every_pod_template_follows_its_stacks_rules(spec, target, stack):
    resource, scheduler, labels, types = EXPECTED[stack]
    loaded = load(spec)
    manifests = export(loaded, replace(options(spec, target), npu_stack=stack))
    seen_npu_pod = False
    for manifest in manifests:
        for template, own_scheduler in pod_templates(manifest.body):
            pod, pod_labels = template["spec"], template["metadata"]["labels"]
            counts = [c.get("resources", {}).get("limits", {}) for c in pod["containers"]]
            if not any(counts):  # the proxy: no NPUs, the default scheduler, no stack label or selector
                assert "schedulerName" not in pod
                if pod_labels.get("deployctl.role") == "scheduler":  # AscendCloud's: it mounts the NPU node's driver
                    assert pod["nodeSelector"] == {"accelerator-type": types[loaded.requirements.cards]}
                else:
                    assert "nodeSelector" not in pod
                assert not set(labels) & set(pod_labels)
                continue
            seen_npu_pod = True
            assert all(list(limits) == [resource] for limits in counts)
            assert {k: pod_labels[k] for k in labels} == labels
            if target == "kthena":  # the ModelServing names Volcano for every role
                assert manifest.body["spec"]["schedulerName"] == "volcano" and "schedulerName" not in pod
            else:
                assert pod.get("schedulerName") == scheduler
            expected = {"accelerator-type": types[loaded.requirements.cards]} if types else None
            assert pod.get("nodeSelector") == expected
    assert seen_npu_pod


def test_a_gpu_export_is_no_stacks_business():
    for stack in STACK_NAMES:
        manifests = export(load("playbooks/gpu-vllm.yaml"),
                           replace(options("playbooks/gpu-vllm.yaml", "k8s"), npu_stack=stack))
        pod = next(m.body for m in manifests if m.kind == "Deployment")["spec"]["template"]
        assert "schedulerName" not in pod["spec"] and "nodeSelector" not in pod["spec"]


def test_mindcluster_refuses_a_node_type_it_cannot_name():
    spec = "tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml"
    text = (ROOT / spec).read_text().replace("cards: 16", "cards: 4").replace(
        "devices: [0, 1, 2, 3, 4, 5, 6, 7]", "devices: [0, 1, 2, 3]").replace("dp: 2, tp: 4", "dp: 1, tp: 4").replace(
        "dp: 4, tp: 4", "dp: 1, tp: 4")
    loaded = load_spec_text(text, environ=ENVIRON)
    with pytest.raises(ExportError) as refused:
        export(loaded, ExportOptions(target="lws", **MAPPED[spec][0]))
    (problem,) = refused.value.problems
    assert problem.path == ("requirements", "cards") and "accelerator-type" in problem.message
    assert export(loaded, ExportOptions(target="lws", npu_stack="plain", **MAPPED[spec][0]))  # plain places it


def test_an_unknown_stack_is_a_bad_flag():
    with pytest.raises(FlagError) as bad:
        export(load("playbooks/gpu-vllm.yaml"), ExportOptions(target="k8s", weights_pvc="w", npu_stack="volcano"))
    assert [f.render() for f in bad.value.flags] == [
        "--npu-stack 'volcano': is not an NPU stack: use one of mindcluster, cce, plain"]
