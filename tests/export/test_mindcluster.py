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
from deployctl.servers.vllm_ascend.groups import kv_ports
from deployctl.spec.load import load_spec_text
from deployctl.spec.startup import startup_budget
from tests.export.cases import ENVIRON, FIXTURES, MAPPED, REFUSED, ROOT, exported, load, options, stacked_cases

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


# Every Ascend playbook on disk, so that one added later is checked too.
ASCEND_PLAYBOOKS = sorted(f"playbooks/{p.name}" for p in (ROOT / "playbooks").glob("*.yaml")
                          if load(f"playbooks/{p.name}").platform == "ascend")
TARGETS = ("k8s", "lws", "kthena")
MINDCLUSTER_RULES = {"node-type", "superpod", "scheduler", "visible-devices", "void-devices", "whole-server",
                     "one-npu-container", "kv-ports", "drain", "grace", "rolling", "startup"}


def _flags(spec: str) -> dict:
    """The flags a user must pass for `export` (and so `--check`) to map the playbook at all; none passes without
    them: a volume for weights.dest (--weights-pvc or --weights-hostpath), a pushed --image where image.build
    builds it on the hosts, a --secret where an env value is a ${VAR}."""
    loaded = load(spec)
    flags = {"weights_pvc": "weights"}
    if loaded.image.build is not None:
        flags["image"] = "registry.example/deployctl/vllm-ascend:1"
    if any(e.is_secret for i in loaded.instances for e in (*loaded.env, *i.env)):
        flags["secret"] = "tokens"
    return flags


FLAG_PATHS = {"weights_pvc": "weights.dest", "image": "image.build", "secret": "env."}


def _npus_a_pod(spec: str) -> set[int]:
    """The NPUs each pod asks for, worked out from the spec alone: a host's ranks of one DP group share a pod
    (servers/vllm_ascend/whole_nodes.py), every other server is a pod of its own."""
    pods = {}
    for i in load(spec).instances:
        if i.devices:
            key = (i.server.group.label, i.host) if i.server is not None else i.name
            pods[key] = pods.get(key, 0) + len(i.devices)
    return set(pods.values())


def _node_types_it_fits(spec: str) -> list[str]:
    """MindCluster's node types of the playbook's card count where every pod asks for the whole node."""
    cards = load(spec).requirements.cards
    return _fits(spec) if _npus_a_pod(spec) == {cards} else []


@pytest.mark.parametrize("spec", ASCEND_PLAYBOOKS)
def test_every_ascend_playbook_passes_the_check_on_every_node_type_it_fits_or_says_it_fits_none(spec):
    """`export --check` on mindcluster, with the playbook's flags: on each node type it fits, every rule is met on
    every target that can express its shape (REFUSED names the others' path), on one target at least; a playbook
    that fits no node type is told so by the rule it breaks, with MindCluster's source, on every target."""
    loaded, flags = load(spec), _flags(spec)
    fits = _node_types_it_fits(spec)
    if not fits:
        rule = "whole-server" if _npus_a_pod(spec) != {loaded.requirements.cards} else "node-type"
        for target in TARGETS:
            rules = check(loaded, ExportOptions(target=target, npu_stack="mindcluster", **flags))
            said = [r for r in rules if r.name == rule]
            assert said and said[0].status == NOT_MET, (target, rules)
            assert said[0].detail.startswith("fits no MindCluster node type: "), said
            assert said[0].source.startswith("mind-cluster docs/en/scheduling/")
            if rule == "whole-server":
                assert "only full-server scheduling is supported" in said[0].source
        return
    for node_type in fits:
        passed_on = []
        for target in TARGETS:
            rules = check(loaded, ExportOptions(target=target, npu_stack="mindcluster", node_type=node_type, **flags))
            assert all(r.source for r in rules)
            failed = [r for r in rules if r.status == NOT_MET]
            if not failed:
                assert MINDCLUSTER_RULES <= {r.name for r in rules}
                passed_on.append(target)
                continue
            refused = REFUSED.get((spec, target))
            assert refused is not None, f"{spec} --to {target} --node-type {node_type}: {failed}"
            # the export's own refusal, or the front's (export/refusals.py `_front`: a P/D router no target carries)
            assert [r.name for r in failed] in (["exports"], ["front"]), failed
            assert failed[0].detail.startswith(refused + ": "), failed
        assert passed_on or all((spec, t) in REFUSED for t in TARGETS), \
            f"{spec} --node-type {node_type} passes on no target"


@pytest.mark.parametrize("spec", ASCEND_PLAYBOOKS)
def test_every_flag_an_ascend_playbook_is_checked_with_is_needed(spec):
    """The flags _flags documents are the ones the export asks for: without each, --check fails, naming the spec
    path that needs it on every target that looks at flags (REFUSED: a shape the target refuses first)."""
    loaded, flags = load(spec), _flags(spec)
    with_flags = check(loaded, ExportOptions(target="k8s", **flags))
    if "front" in {r.name for r in with_flags}:  # refused before any flag is looked at: none changes the verdict
        assert check(loaded, ExportOptions(target="k8s")) == with_flags
        return
    for flag in flags:
        without = {k: v for k, v in flags.items() if k != flag}
        named = []
        for target in TARGETS:
            rules = check(loaded, ExportOptions(target=target, npu_stack="mindcluster", **without))
            exports = [r for r in rules if r.name == "exports"]
            assert exports and exports[0].status == NOT_MET, (flag, target, rules)
            if FLAG_PATHS[flag] in exports[0].detail:
                named.append(target)
            else:
                assert exports[0].detail.startswith(REFUSED[(spec, target)] + ": "), (flag, target, exports)
        assert named, (flag, "no target names it")


def test_a_card_count_with_no_node_type_fits_none_by_the_node_type_rule():
    """Whole 2-NPU servers: MindCluster documents no 2-NPU node type vLLM runs on, whatever else the spec asks."""
    text = (ROOT / "playbooks/mixed-1host-910b.yaml").read_text().replace("cards: 8 ", "cards: 2 ")
    loaded = load_spec_text(text, environ=ENVIRON)
    assert loaded.requirements.cards == 2
    rules = check(loaded, ExportOptions(target="k8s", weights_pvc="w", image="registry.example/v:1"))
    assert [(r.name, r.status) for r in rules] == [("node-type", NOT_MET)]
    assert rules[0].detail.startswith("fits no MindCluster node type: requirements.cards: 2 NPUs a node")
    assert "docs/en/scheduling/api/k8s.md" in rules[0].source


def test_a_front_of_deployctls_own_is_its_own_rule_with_its_source():
    """mixed-router-910b's vllm-router: on a cluster the Service balances the servers, so it is not exported."""
    spec = "playbooks/mixed-router-910b.yaml"
    rules = {r.name: r for r in check(load(spec), ExportOptions(target="k8s", npu_stack="plain", **_flags(spec)))}
    assert list(rules) == ["front"] and rules["front"].status == NOT_MET
    assert rules["front"].detail.startswith("topology.front: the vllm-router front")
    assert "services-networking/service" in rules["front"].source


def test_the_check_says_a_rule_the_cluster_must_keep():
    rules = {r.name: r for r in check(load(QWEN3), options(QWEN3, "lws"))}
    assert rules["lws-gang"].status == CLUSTER and "schedulerProvider: volcano" in rules["lws-gang"].detail


def test_the_check_reports_a_refused_export_and_a_node_type_that_does_not_fit():
    rules = check(load(QWEN3), replace(options(QWEN3, "lws"), node_type="module-a3-8-super-pod"))
    assert [(r.name, r.status) for r in rules] == [("node-type", NOT_MET)]
    assert rules[0].detail.startswith("requirements.cards: requirements.cards is 16, and a --node-type "
                                      "module-a3-8-super-pod node")


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
