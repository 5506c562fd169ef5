"""--npu-stack mindcluster against MindCluster's documented rules (node types and SuperPoD annotations, the device
annotation, kv ports out of the ephemeral range) and updates that drain like `up`; `export --check` reads every
rule back from the objects."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployctl.errors import ExportError, FlagError
from deployctl.export.check import CLUSTER, MET, NOT_MET, check
from deployctl.export.options import ExportOptions
from deployctl.export.pods import DRAIN_S, ENDPOINT_SETTLE_S, PRESTOP_SCRIPT, STARTUP_MARGIN_S
from deployctl.export.render import export
from deployctl.export.stacks import NODE_TYPE_NAMES, NODE_TYPES, pod_templates
from deployctl.spec.dp_groups import kv_ports
from deployctl.spec.load import load_spec_text
from deployctl.spec.startup import startup_budget
from tests.export.cases import (ENVIRON, FIXTURES, MAPPED, REFUSED, ROOT, STACK_REFUSED, exported, load, options,
                                stacked_cases)

QWEN3 = "playbooks/vllm-ascend-pd-qwen3.yaml"  # 16 NPUs a node; decode0 over node2 + node3
ASCEND = [c for c in stacked_cases() if load(c[0]).platform == "ascend"]
# mind-cluster docs/en/scheduling/api/k8s.md, table 4, accelerator-type ({xxx} is "910")
DOCUMENTED = ("card", "module", "half", "module-910b-8", "module-910b-16", "card-910b-2", "card-910b-infer",
              "module-a3-16", "module-a3-16-super-pod", "module-a3-8-super-pod", "350-Atlas-8", "350-Atlas-16",
              "350-Atlas-4p-8", "350-Atlas-4p-16", "850-Atlas-8p-8", "850-SuperPod-Atlas-8", "950-SuperPod-Atlas-8")


def with_node_type(spec: str, target: str, node_type: str):
    return export(load(spec), replace(options(spec, target), node_type=node_type))


def npu_templates(manifests):
    for manifest in manifests:
        for template, _ in pod_templates(manifest.body):
            if any(c.get("resources", {}).get("limits") for c in template["spec"]["containers"]):
                yield manifest.body, template


# --- 8: node types --------------------------------------------------------------------------------------------

def test_every_documented_accelerator_type_is_a_node_type():
    assert set(NODE_TYPE_NAMES) == set(DOCUMENTED)


@pytest.mark.parametrize("target", ("lws", "kthena"))
def test_a_superpod_node_type_is_selected_and_annotated(target):
    manifests = with_node_type(QWEN3, target, "module-a3-16-super-pod")
    blocks = set()
    for _, template in npu_templates(manifests):
        assert template["spec"]["nodeSelector"] == {"accelerator-type": "module-a3-16-super-pod"}
        notes = template["metadata"]["annotations"]
        assert notes["huawei.com/schedule_policy"] == "chip2-node16-sp"
        blocks.add(notes["sp-block"])
    # one instance's NPUs, whole nodes (sp-block is a multiple of a node's): prefill0 one node, decode0 two
    assert blocks == {"16", "32"}


def test_a_plain_node_type_has_no_superpod_annotations():
    for _, template in npu_templates(with_node_type(QWEN3, "lws", "module-910b-16")):
        assert template["spec"]["nodeSelector"] == {"accelerator-type": "module-910b-16"}
        assert "annotations" not in template["metadata"]


@pytest.mark.parametrize("node_type", ("module-a3-8-super-pod", "module-910b-8"))
def test_a_node_type_that_does_not_fit_the_cards_is_refused(node_type):
    with pytest.raises(ExportError) as refused:
        with_node_type(QWEN3, "lws", node_type)
    (problem,) = refused.value.problems
    assert problem.path == ("requirements", "cards")
    assert f"--node-type {node_type} node" in problem.message and "has 8 NPUs" in problem.message
    assert "module-910b-16 or module-a3-16 or module-a3-16-super-pod" in problem.hint


@pytest.mark.parametrize("node_type", ("half", "350-Atlas-16", "card-910b-2"))
def test_a_node_type_vllm_does_not_run_on_is_refused_saying_why(node_type):
    with pytest.raises(ExportError) as refused:
        with_node_type(QWEN3, "lws", node_type)
    (problem,) = refused.value.problems
    assert problem.message.startswith(f"--node-type {node_type} is ") and NODE_TYPES[node_type].unsupported in (
        problem.message)


def test_the_node_type_flag_is_held_to_the_documented_values_and_to_mindcluster():
    with pytest.raises(FlagError) as bad:
        export(load(QWEN3), replace(options(QWEN3, "lws"), node_type="module-a3-32"))
    assert "is not a node type MindCluster documents" in bad.value.flags[0].render()
    with pytest.raises(FlagError) as bad:
        export(load(QWEN3), replace(options(QWEN3, "lws", "plain"), node_type="module-a3-16"))
    assert "--npu-stack plain does not use" in bad.value.flags[0].render()


# --- 10: MindCluster's device rules and the kv ports ------------------------------------------------------------

@pytest.mark.parametrize("spec,target,stack", ASCEND)
def test_npu_containers_see_the_device_annotation_and_the_others_void(spec, target, stack):
    resource = "huawei.com/ascend-1980" if stack == "cce" else "huawei.com/Ascend910"
    seen = set()
    for manifest in exported(spec, target, stack):
        for template, _ in pod_templates(manifest.body):
            for container in template["spec"]["containers"]:
                value = [e for e in container.get("env", []) if e["name"] == "ASCEND_VISIBLE_DEVICES"]
                if stack != "mindcluster":  # Ascend Docker Runtime's variable is Volcano-mode MindCluster's only
                    assert value == []
                elif container.get("resources", {}).get("limits"):
                    seen.add("npu")
                    assert value == [{"name": "ASCEND_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
                        "fieldPath": f"metadata.annotations['{resource}']"}}}]
                else:
                    seen.add("none")
                    assert value == [{"name": "ASCEND_VISIBLE_DEVICES", "value": "void"}]
    assert stack != "mindcluster" or "npu" in seen


@pytest.mark.parametrize("stack", ("mindcluster", "plain"))
def test_every_pd_pod_reserves_its_kv_ports(stack):
    spec = load(QWEN3)
    groups = {g.label: g for g in spec.upstream.groups}
    body = {m.name: m.body for m in exported(QWEN3, "lws", stack)}
    decode = body["qwen3-pd-decode0"]["spec"]["leaderWorkerTemplate"]
    group = groups["decode0"]

    def reserved(template):
        (sysctl,) = template["spec"]["securityContext"]["sysctls"]
        assert sysctl["name"] == "net.ipv4.ip_local_reserved_ports"
        low, high = map(int, sysctl["value"].split("-"))
        return tuple(range(low, high + 1))

    assert reserved(decode["leaderTemplate"]) == kv_ports(group, "node2")
    assert reserved(decode["workerTemplate"]) == kv_ports(group, "node3")
    prefill = body["qwen3-pd-prefill0"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert reserved(prefill) == kv_ports(groups["prefill0"], "node1")


def test_a_mixed_pod_binds_no_kv_port_and_reserves_none():
    for _, template in npu_templates(exported("playbooks/vllm-ascend-mixed-ep-1host.yaml", "lws")):
        assert "securityContext" not in template["spec"]


# --- 11: updates drain ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,target,stack", ASCEND)
def test_every_server_drains_before_it_stops_and_updates_surge(spec, target, stack):
    manifests = exported(spec, target, stack)
    for body, template in npu_templates(manifests):
        grace = template["spec"]["terminationGracePeriodSeconds"]
        for container in template["spec"]["containers"]:
            hook = container["lifecycle"]["preStop"]["exec"]["command"]
            assert hook[:3] == ["python3", "-c", PRESTOP_SCRIPT]
            assert hook[4:] == [str(ENDPOINT_SETTLE_S), str(DRAIN_S), "vllm:num_requests_running",
                                "vllm:num_requests_waiting"]
        assert grace > ENDPOINT_SETTLE_S + DRAIN_S + 30  # + the server's own graceful stop
    for manifest in manifests:
        if manifest.kind == "Deployment" and "ring-controller.atlas" in manifest.body["metadata"]["labels"]:
            # ascend-operator keeps the old pod's ranktable while two are placed: a surge pod would wait forever
            assert manifest.body["spec"]["strategy"] == {
                "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
        elif manifest.kind == "Deployment":
            assert manifest.body["spec"]["strategy"] == {
                "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        if manifest.kind == "LeaderWorkerSet":
            assert manifest.body["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] == {
                "maxUnavailable": 0, "maxSurge": 1}


def test_a_worker_waits_for_its_leaders_drain():
    shape = next(m.body for m in exported(QWEN3, "lws") if m.name == "qwen3-pd-decode0")["spec"]["leaderWorkerTemplate"]
    (worker,) = shape["workerTemplate"]["spec"]["containers"]
    assert worker["lifecycle"]["preStop"]["exec"]["command"][3] == "http://{LWS_LEADER_ADDRESS}:9100/metrics"


class _Metrics(BaseHTTPRequestHandler):
    pages: list = []
    served: list = []

    def do_GET(self):
        page = self.pages[min(len(self.served), len(self.pages) - 1)]
        self.served.append(self.path)
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _page(running: float, waiting: float) -> str:
    # vLLM's gauges as prometheus_client writes them (labelled), and one that only starts with the name
    return (f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
            f'vllm:num_requests_waiting_by_reason{{reason="capacity"}} 7.0\n')


def test_the_prestop_hook_returns_once_the_server_runs_and_queues_nothing():
    """The hook itself, run against an HTTP server on loopback that reports 2, then 1 queued, then none."""
    _Metrics.pages, _Metrics.served = [_page(2, 0), _page(0, 1), _page(0, 0), _page(5, 5)], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = "http://{HOOK_HOST}:%d/metrics" % server.server_address[1]  # `{VAR}` from the pod's environment
        done = subprocess.run([sys.executable, "-c", PRESTOP_SCRIPT, url, "0", "60", "vllm:num_requests_running",
                               "vllm:num_requests_waiting"], env={"HOOK_HOST": "127.0.0.1"}, capture_output=True,
                              timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert _Metrics.served == ["/metrics"] * 3  # stopped at the first page with nothing running or waiting


def test_the_prestop_hook_ends_when_the_server_is_gone():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    port = server.server_address[1]
    server.server_close()  # nothing listens there any more
    done = subprocess.run([sys.executable, "-c", PRESTOP_SCRIPT, f"http://127.0.0.1:{port}/metrics", "0", "60",
                           "vllm:num_requests_running"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


# --- 12: the start-up budget -----------------------------------------------------------------------------------

def _budget(container: dict) -> int:
    probe = container["startupProbe"]
    return probe["periodSeconds"] * probe["failureThreshold"]


def test_the_start_up_probe_outlasts_the_servers_own_deadline():
    spec = load(QWEN3)
    leaders = [c for _, t in npu_templates(exported(QWEN3, "lws")) for c in t["spec"]["containers"]
               if "startupProbe" in c]
    assert leaders and all(_budget(c) >= startup_budget(spec).seconds + STARTUP_MARGIN_S for c in leaders)
    # an engine deadline written in the spec's env, longer than up's budget, moves the probe with it
    text = (ROOT / QWEN3).read_text().replace("\nenv: {", "\nenv: {VLLM_ENGINE_READY_TIMEOUT_S: \"4000\", ", 1)
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in text
    longer = export(load_spec_text(text, environ=ENVIRON), options(QWEN3, "lws"))
    assert {_budget(c) for _, t in npu_templates(longer) for c in t["spec"]["containers"] if "startupProbe" in c} == {
        4000 + STARTUP_MARGIN_S}


# --- 13: the citations ---------------------------------------------------------------------------------------

def test_every_mindcluster_path_the_export_cites_exists():
    """tests/fixtures/export/mindcluster-paths.txt lists mind-cluster's tree at the commit it names."""
    listing = {line for line in (FIXTURES / "mindcluster-paths.txt").read_text().splitlines()
               if line and not line.startswith("#")}
    cited = set()
    for module in ("stacks.py", "check.py", "pd_ranktables.py", "refusals.py"):
        source = (ROOT / "deployctl" / "export" / module).read_text()
        source = re.sub(r"/\n\s*# ", "/", source)  # a path broken over comment lines
        cited |= set(re.findall(r"(?:docs/(?:en|zh)|component)/[\w./-]+?\.(?:md|go)\b", source))
    assert cited and not sorted(cited - listing)


# --- export --check --------------------------------------------------------------------------------------------

def _fits(spec: str) -> list[str]:
    cards = load(spec).requirements.cards
    return [t.label for t in NODE_TYPES.values() if t.cards == cards and not t.unsupported]


CHECKED = [(spec, target, node_type) for spec, target, stack in ASCEND if stack == "mindcluster"
           for node_type in _fits(spec)]


@pytest.mark.parametrize("spec,target,node_type", CHECKED)
def test_every_ascend_playbook_passes_the_check_on_every_node_type_it_fits(spec, target, node_type):
    rules = check(load(spec), replace(options(spec, target), node_type=node_type))
    failed = {r.name: r.detail for r in rules if r.status == NOT_MET}
    names = {r.name for r in rules}
    assert {"node-type", "superpod", "scheduler", "visible-devices", "void-devices", "whole-server", "kv-ports",
            "drain", "grace", "rolling", "startup"} <= names
    assert all(r.source for r in rules)
    assert failed == {}  # part of a node is refused by the export itself (cases.STACK_REFUSED)


ASCEND_PLAYBOOKS = sorted(f"playbooks/{p.name}" for p in (ROOT / "playbooks").glob("*.yaml")
                          if load(f"playbooks/{p.name}").platform == "ascend")
REFUSED_ON_MINDCLUSTER = {**REFUSED,
                          **{(spec, t): v for (spec, t, stack), v in STACK_REFUSED.items() if stack == "mindcluster"}}


def _all_node_types(spec: str) -> list[str]:
    """The node types of the spec's card count; none documented for it: the default the export picks."""
    return _fits(spec) or [None]


@pytest.mark.parametrize("spec", ASCEND_PLAYBOOKS)
@pytest.mark.parametrize("target", ("k8s", "lws", "kthena"))
def test_the_check_on_every_ascend_playbook_passes_or_says_the_rule_it_breaks_with_its_source(spec, target):
    """Every Ascend playbook (found on disk, so a new one is checked too) x target x node type of its card count:
    `export --check` on mindcluster passes where the export maps, and where it is refused says which rule, at the
    path the refusal names, with the rule's source; part of a node is the whole-server rule: no node type fits."""
    flags = MAPPED.get(spec, (dict(weights_pvc="weights", image="registry.example/deployctl/image:1"),))[0]
    refused = REFUSED_ON_MINDCLUSTER.get((spec, target))
    assert refused is not None or (spec in MAPPED and target in MAPPED[spec][1]), \
        f"{spec} --to {target}: neither mapped (cases.MAPPED) nor refused with its path (cases.REFUSED)"
    for node_type in _all_node_types(spec):
        rules = check(load(spec), ExportOptions(target=target, npu_stack="mindcluster", node_type=node_type, **flags))
        assert all(r.source for r in rules)
        failed = [r for r in rules if r.status == NOT_MET]
        if refused is None:
            assert failed == [], (node_type, failed)
            continue
        assert failed and all(r.name in ("exports", "whole-server") for r in failed), failed
        assert refused in " ".join(r.detail for r in failed), (refused, failed)
        whole = [r for r in failed if r.name == "whole-server"]
        if refused.endswith((".devices", ".dp")):
            assert whole and whole[0].detail.startswith("fits no MindCluster node type: "), failed
            assert "only full-server scheduling is supported" in whole[0].source


def test_the_check_says_a_rule_the_cluster_must_keep():
    rules = {r.name: r for r in check(load(QWEN3), options(QWEN3, "lws"))}
    assert rules["lws-gang"].status == CLUSTER and "schedulerProvider: volcano" in rules["lws-gang"].detail


def test_the_check_reports_a_refused_export_and_a_node_type_that_does_not_fit():
    rules = check(load(QWEN3), replace(options(QWEN3, "lws"), node_type="module-a3-8-super-pod"))
    assert [(r.name, r.status) for r in rules] == [("exports", NOT_MET)]
    assert "requirements.cards" in rules[0].detail


def test_check_on_the_command_line(capsys):
    from deployctl.cli import main

    flags = ["--weights-pvc", MAPPED[QWEN3][0]["weights_pvc"], "--to", "lws", "--check", "--output", "json"]
    assert main(["export", str(ROOT / QWEN3), *flags, "--node-type", "module-a3-16-super-pod"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["node_type"] == "module-a3-16-super-pod"
    assert {r["rule"]: r["status"] for r in document["rules"]}["superpod"] == MET
    assert all(r["source"] for r in document["rules"])
    partial = ROOT / "playbooks/mixed-1host-910b.yaml"
    assert main(["export", str(partial), "--to", "k8s", "--weights-pvc", "w", "--image", "r.example/v:1",
                 "--check"]) == 1
    assert "MindCluster's vLLM guide supports full-server scheduling only" in capsys.readouterr().out
    assert main(["export", str(partial), "--to", "k8s", "--weights-pvc", "w", "--image", "r.example/v:1",
                 "--npu-stack", "plain", "--check"]) == 0


def test_a_default_export_still_matches_the_stacks_selector():
    """Without --node-type the card count picks module-910b-8 / module-a3-16, as before."""
    assert ExportOptions(target="lws").node_type is None
    for _, template in npu_templates(exported(QWEN3, "lws")):
        assert template["spec"]["nodeSelector"] == {"accelerator-type": "module-a3-16"}
