"""What a target cannot express is one error naming the spec path at its file:line, exit 2: never a silent drop."""

from __future__ import annotations

import json
import re

import pytest

from deployctl.cli import main
from deployctl.errors import ExportError
from deployctl.export.options import ExportOptions
from deployctl.export.render import export
from deployctl.export.stacks import STACK_NAMES
from deployctl.spec.load import load_spec
from tests.export.cases import ENVIRON, REFUSED, ROOT, STACK_REFUSED

PVC = ["--weights-pvc", "models"]
IMAGE = ["--image", "registry.example/vllm-ascend:6.3.909"]


def edited(tmp_path, playbook: str, *swaps: tuple[str, str]) -> str:
    text = (ROOT / playbook).read_text()
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


# (id, spec maker, flags, the spec path the one error names, a word of its message)
BAD = [
    ("ascendcloud-pd-k8s", lambda t: str(ROOT / "playbooks/demo-pd.yaml"), ["--to", "k8s", "--npu-stack", "plain",
                                                                           *PVC], "topology", "ranktables"),
    ("ascendcloud-pd-lws", lambda t: str(ROOT / "playbooks/disaggregated-2hosts-910b.yaml"),
     ["--to", "lws", "--npu-stack", "cce", *PVC], "topology", "ranktables"),
    ("ascendcloud-pd-kthena", lambda t: str(ROOT / "playbooks/pd-1host-910b.yaml"),
     ["--to", "kthena", "--npu-stack", "plain", *PVC], "topology", "--npu-stack mindcluster"),
    ("multi-node-group-k8s", lambda t: str(ROOT / "playbooks/vllm-ascend-mixed-2hosts-internal.yaml"),
     ["--to", "k8s", *PVC], "topology.groups[0].hosts", "no gang"),
    ("external-ranks-kthena", lambda t: str(ROOT / "playbooks/vllm-ascend-pd-qwen3.yaml"),
     ["--to", "kthena", "--npu-stack", "cce", *PVC], "topology.decode[0].hosts", "no stable address"),
    ("secret-inlined", lambda t: edited(t, "playbooks/vllm-ascend-mixed-ep-1host.yaml",
                                        ("topology:", "env: {HF_TOKEN: hf_abcdefgh}\ntopology:")),
     ["--to", "lws", *PVC], "env.HF_TOKEN", "in the clear"),
    ("secret-without-a-secret", lambda t: str(ROOT / "tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml"),
     ["--to", "lws", "--npu-stack", "plain", *PVC], "env.HF_TOKEN", "secretKeyRef"),
    # 8 of a node's 16 NPUs: MindCluster's vLLM guide schedules whole servers only (the contract, 2026-11-28)
    ("part-of-a-node-on-mindcluster", lambda t: str(ROOT / "tests/fixtures/export/specs/vllm-ascend-pd-1host.yaml"),
     ["--to", "lws", "--secret", "tokens", *PVC], "topology.prefill[0].dp", "full-server scheduling only"),
    ("no-weights-volume", lambda t: str(ROOT / "playbooks/gpu-vllm.yaml"), ["--to", "k8s"], "weights.dest",
     "--weights-pvc"),
    ("host-name-too-long", lambda t: edited(t, "playbooks/vllm-ascend-mixed-ep-1host.yaml",
                                            ("node1:", "node-" + "a" * 40 + ":"),
                                            ("hosts: [node1]", "hosts: [node-" + "a" * 40 + "]")),
     ["--to", "k8s", *PVC], "hosts.node-" + "a" * 40, "too long"),
    ("group-device-count", lambda t: edited(t, "playbooks/vllm-ascend-mixed-ep-1host.yaml",
                                            ("dp: 4, tp: 4", "dp: 3, tp: 4")),
     ["--to", "k8s", *PVC], "topology.groups[0].dp", "12 NPUs"),
    ("host-address-env", lambda t: edited(t, "playbooks/vllm-ascend-mixed-2hosts-internal.yaml",
                                          ('HCCL_BUFFSIZE: "1024"', 'HCCL_BUFFSIZE: "1024", HCCL_IF_IP: 192.0.2.51')),
     ["--to", "lws", *PVC], "topology.groups[0].env.HCCL_IF_IP", "pod has its own"),
    ("image-built-on-hosts", lambda t: str(ROOT / "playbooks/mixed-1host-910b.yaml"),
     ["--to", "lws", "--npu-stack", "plain", *PVC], "image.build", "--image"),
    ("host-name-not-a-dns-label", lambda t: edited(t, "playbooks/vllm-ascend-mixed-ep-1host.yaml",
                                                   ("node1:", "Node_1:"), ("hosts: [node1]", "hosts: [Node_1]")),
     ["--to", "k8s", *PVC], "hosts.Node_1", "lower-case"),
]


@pytest.mark.parametrize("make,flags,path,word", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_one_error_naming_the_spec_path(tmp_path, capsys, make, flags, path, word):
    spec = make(tmp_path)
    assert main(["export", spec, *flags]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    located = [line for line in err.splitlines() if re.match(rf"{re.escape(spec)}:\d+:\d+: ", line)]
    assert len(located) == 1, err
    line = located[0]
    assert int(line.split(":")[1]) > 0 and f": {path}: " in line and word in err, err


def test_the_refused_table_names_each_error_as_the_cli_does(capsys):
    for (playbook, target), path in sorted(REFUSED.items()):
        assert main(["export", str(ROOT / playbook), "--to", target, *PVC]) == 2
        err = capsys.readouterr().err
        assert f": {path}: " in err, (playbook, target, err)
    for (playbook, target, stack), path in sorted(STACK_REFUSED.items()):
        assert main(["export", str(ROOT / playbook), "--to", target, "--npu-stack", stack, *PVC]) == 2
        err = capsys.readouterr().err
        assert f": {path}: " in err, (playbook, target, stack, err)


def test_json_failure_lists_every_problem_with_its_line(capsys):
    spec = str(ROOT / "playbooks/mixed-1host-910b.yaml")
    assert main(["export", spec, "--to", "k8s", "--npu-stack", "plain", "--output", "json"]) == 2
    import json

    problems = json.loads(capsys.readouterr().out)["error"]["problems"]
    assert [p["path"] for p in problems] == ["image.build", "weights.dest"]
    assert all(p["line"] > 0 for p in problems)


def refused_problems(spec: str, target: str, stack: str, **flags) -> list:
    with pytest.raises(ExportError) as refused:
        export(load_spec(spec, environ=ENVIRON), ExportOptions(target=target, npu_stack=stack, **flags))
    return refused.value.problems


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_refusal_says_what_would_make_it_exportable(tmp_path, capsys, stack):
    """Each refused case of the table on this stack, and of BAD (with its own flags): every problem the command
    reports carries a hint, what to change."""
    runs = [[str(ROOT / playbook), "--to", target, "--npu-stack", stack, *PVC] for playbook, target in REFUSED]
    for n, (_, make, flags, _, _) in enumerate(BAD):  # each edited spec in its own directory
        (tmp_path / str(n)).mkdir()
        runs.append([make(tmp_path / str(n)), *flags])
    for args in runs:
        assert main(["export", *args, "--output", "json"]) == 2
        problems = json.loads(capsys.readouterr().out)["error"]["problems"]
        assert problems and all(p.get("hint", "").strip() for p in problems), (args, problems)


def test_the_ascendcloud_pd_flow_on_mindcluster_is_refused_where_the_operator_writes_no_ranktable():
    """ascend-operator writes ranktables for Deployments, StatefulSets and Volcano Jobs only (mind-cluster
    component/ascend-operator/pkg/ranktable/plugins.go): LWS and Kthena are refused at topology, naming the
    operator and --to k8s; with --to k8s the seed playbooks' part-of-node instances meet the whole-server rule."""
    for target, kind in (("lws", "LeaderWorkerSet"), ("kthena", "ModelServing")):
        (problem,) = refused_problems(str(ROOT / "playbooks/pd-1host-910b.yaml"), target, "mindcluster",
                                      weights_pvc="models")
        assert problem.path == ("topology",) and "ascend-operator" in problem.message and kind in problem.message
        assert "--to k8s" in problem.hint
    problems = refused_problems(str(ROOT / "playbooks/pd-1host-910b.yaml"), "k8s", "mindcluster", weights_pvc="models")
    assert [p.dotted_path for p in problems] == ["topology.prefill[0].devices", "topology.decode[0].devices"]
    assert all("full-server scheduling only" in p.message for p in problems)


def test_other_stacks_point_the_ascendcloud_pd_flow_to_mindcluster():
    for stack in ("cce", "plain"):
        (problem,) = refused_problems(str(ROOT / "playbooks/pd-1host-910b.yaml"), "lws", stack, weights_pvc="models")
        assert problem.path == ("topology",) and f"--npu-stack {stack}" in problem.message
        assert "--npu-stack mindcluster" in problem.hint and "mode: mixed" in problem.hint


def test_hooks_are_refused_at_their_path_never_dropped_silently(tmp_path):
    """Hooks run around deployctl's own up, down and waves; an exported cluster has none of them to run around."""
    text = (ROOT / "playbooks/vllm-ascend-mixed-ep-1host.yaml").read_text()
    spec = tmp_path / "hooked.yaml"
    spec.write_text(text + "hooks:\n  post_up: {command: [echo, up]}\n  pre_down: {command: [echo, down]}\n")
    problems = refused_problems(str(spec), "lws", "plain", weights_pvc="models")
    assert [(p.dotted_path, p.message.split(":")[0]) for p in problems] == [
        ("hooks.post_up", "hooks.post_up is not exported"), ("hooks.pre_down", "hooks.pre_down is not exported")]
    assert all(p.hint for p in problems)
