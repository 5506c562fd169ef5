"""`export --check` (pure): every rule an export must keep on its target and NPU stack, read back from the objects
the export renders, each met or not, with the source it follows. A rule the objects cannot show (the cluster's own
configuration) is said as one to check on the cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from deployctl.errors import ExportError
from deployctl.export.gangs import gangs
from deployctl.export.options import ExportOptions
from deployctl.export.pods import DRAIN_S, ENDPOINT_SETTLE_S, STARTUP_MARGIN_S
from deployctl.export.servers import RESERVED_PORTS
from deployctl.export.stacks import (ACCELERATOR_TYPE, NO_DEVICES, SCHEDULE_POLICY, SP_BLOCK, VISIBLE_DEVICES,
                                     npu_count, pod_templates)
from deployctl.plan.containers import LABEL_ROLE
from deployctl.servers.metrics import VLLM_V1
from deployctl.spec.model import Spec

MET, NOT_MET, CLUSTER = "met", "not met", "on the cluster"

MC_GUIDE = "mind-cluster docs/en/scheduling/usage/vllm_best_practice/01_deploying_vllm_inference_job.md"
SOURCES = {
    "exports": "deployctl export: every spec path the target cannot express is refused",
    "node-type": "mind-cluster docs/en/scheduling/api/k8s.md (accelerator-type); "
                 "component/ascend-for-volcano/common/util/constants.go",
    "superpod": MC_GUIDE + " (sp-block, huawei.com/schedule_policy); component/ascend-common/api/consts.go",
    "scheduler": MC_GUIDE + " (schedulerName volcano); component/ascend-for-volcano/common/util/type.go "
                            "(ring-controller.atlas)",
    "visible-devices": MC_GUIDE + " (env ASCEND_VISIBLE_DEVICES from metadata.annotations)",
    "void-devices": "mind-cluster docs/en/scheduling/usage/containerization/02_usage_on_the_docker_client.md "
                    "(ASCEND_VISIBLE_DEVICES=void); component/ascend-docker-runtime/runtime/process/process.go",
    "whole-server": MC_GUIDE + " (huawei.com/Ascend910: \"only full-server scheduling is supported\"); mind-cluster "
                    "docs/en/scheduling/usage/infer_operator_best_practice/"
                    "01_deploying_infer_operator_inference_job_with_vllm_proxy.md (\"only full-machine scheduling\")",
    "front": "deployctl fronts/ (a front of deployctl's own on hosts says why it is not exported); kubernetes.io/docs/"
             "concepts/services-networking/service/ (a Service balances its ready endpoints)",
    "one-npu-container": "mind-cluster component/ascend-device-plugin/pkg/server/plugin.go (Volcano mode: a "
                         "container's request must match the pod's device annotation)",
    "lws-gang": "kubernetes-sigs/lws site/content/en/docs/concepts/leaderworkerset/gang-scheduling "
                "(gangSchedulingManagement.schedulerProvider: volcano)",
    "kv-ports": "kubernetes pkg/kubelet/sysctl/safe_sysctls.go (net.ipv4.ip_local_reserved_ports safe from 1.27); "
                "deployctl plan/reserve_ports.py (as `up` reserves them on hosts)",
    "drain": "kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination; deployctl "
             f"plan/actions.py Drain ({VLLM_V1.running} + {VLLM_V1.waiting} = 0)",
    "grace": "kubernetes.io pod-lifecycle (preStop counts inside terminationGracePeriodSeconds); deployctl "
             "servers/shutdown.py (the one stop policy)",
    "rolling": "kubernetes.io/docs/concepts/workloads/controllers/deployment/#rolling-update-deployment; LWS "
               "rolloutStrategy.rollingUpdateConfiguration",
    "operator-ranktable": "mind-cluster component/ascend-operator/pkg/ranktable/plugins.go (deploymentPlugin: a "
                          "Deployment labelled ring-controller.atlas); pkg/controllers/v1/consts.go (rings-config-, "
                          "deploy-name, hccl.json); docs/en/scheduling/api/hccl.json_file_description.md",
    "ranktable-merge": "deployctl ranktable/merge.py (`ranktable merge`, as pd_ranktable_tools.py --mode merge); "
                       "deployctl incluster/pd_ranktable_merge.py; runbook section 4 (GLOBAL_RANK_TABLE_FILE_PATH, "
                       "RANK_TABLE_FILE_PATH)",
    "ranktable-update": "mind-cluster component/ascend-operator/pkg/controllers/v1/pod.go handleCompletedRankTable "
                        "(more placed pods than replicas: the old ranktable is kept)",
    "ranktable-refresh": "deployctl incluster/pd_ranktable_merge.py (merged once, at the pod's start); "
                         "kubernetes.io pod-lifecycle (a recreated pod gets a new IP)",
    "startup": "deployctl spec/startup.py (`up`'s health budget); vllm/envs.py VLLM_ENGINE_READY_TIMEOUT_S; LWS "
               "RecreateGroupOnPodRestart (a failed leader restarts its group)",
}


@dataclass(frozen=True)
class Rule:
    name: str
    status: str  # MET, NOT_MET or CLUSTER
    detail: str

    @property
    def source(self) -> str:
        return SOURCES[self.name]

    def to_json(self) -> dict:
        return {"rule": self.name, "status": self.status, "detail": self.detail, "source": self.source}


def check(spec: Spec, options: ExportOptions) -> list[Rule]:
    """Every rule of `options`' target and stack for `spec`, in a fixed order."""
    from deployctl.export.render import export

    try:
        manifests = export(spec, options)
    except ExportError as refused:
        return _refused(spec, options, refused.problems)
    bodies = [m.body for m in manifests]
    rules = [Rule("exports", MET, f"{len(bodies)} objects for --to {options.target}")]
    if spec.platform == "ascend" and options.npu_stack == "mindcluster":
        rules += _mindcluster(spec, options, bodies)
    from deployctl.export import pd_ranktables

    if pd_ranktables.applies(spec, options):
        rules += _cluster_ranktables(spec, bodies)
    rules += _updates(spec, options, bodies)
    return rules


def _refused(spec: Spec, options: ExportOptions, problems: list) -> list[Rule]:
    """A refused export, said by the rule it breaks: pods that ask for part of a node, or a card count with no node
    type, fit no MindCluster node type (whatever else refuses the export); a front of deployctl's own is not
    exported; every other refusal is the export's, at its spec path."""
    from deployctl.export.refusals import node_type, part_of_node

    said = lambda found: "; ".join(f"{p.dotted_path}: {p.message}" for p in found)
    partial, placed = part_of_node(spec, options), node_type(spec, options)
    front = [p for p in problems if p.path == ("topology", "front")]
    ruled = {(p.path, p.message) for p in partial + placed + front}  # the export's carry their file: not ==
    rest = [p for p in problems if (p.path, p.message) not in ruled]
    rules = []
    if placed:
        none_fits = options.node_type is None and options.stack.refuses(spec.requirements.cards)
        fits = "fits no MindCluster node type: " if none_fits else ""
        rules.append(Rule("node-type", NOT_MET, fits + said(placed)))
    if partial:
        rules.append(Rule("whole-server", NOT_MET, f"fits no MindCluster node type: {said(partial)}"))
    if front:
        rules.append(Rule("front", NOT_MET, said(front)))
    return rules + ([Rule("exports", NOT_MET, said(rest))] if rest or not rules else [])


def passed(rules: list[Rule]) -> bool:
    return all(r.status != NOT_MET for r in rules)


def _templates(bodies: list[dict]) -> Iterator[tuple[dict, dict]]:
    for body in bodies:
        for template, _ in pod_templates(body):
            yield body, template


def _rule(name: str, broken: list[str], good: str) -> Rule:
    return Rule(name, NOT_MET, "; ".join(broken)) if broken else Rule(name, MET, good)


def _mindcluster(spec: Spec, options: ExportOptions, bodies: list[dict]) -> list[Rule]:
    resource, cards = options.device_resource, spec.requirements.cards
    chosen = options.stack.node_type(cards, options.node_type)
    npu = [(b, t) for b, t in _templates(bodies) if any(npu_count(c, resource) for c in t["spec"]["containers"])]
    where = lambda b, t: f"{b['kind']} {b['metadata']['name']} ({t['metadata']['labels'].get('deployctl.instance')})"
    out = []
    wanted = {ACCELERATOR_TYPE: chosen.label} if chosen else None
    out.append(_rule("node-type", [f"{where(b, t)}: nodeSelector {t['spec'].get('nodeSelector')}" for b, t in npu
                                   if t["spec"].get("nodeSelector") != wanted or chosen.cards != cards],
                     f"accelerator-type {chosen.label if chosen else None} ({cards} NPUs a node)"))
    if chosen is not None and chosen.superpod:
        broken = []
        for b, t in npu:
            notes = t["metadata"].get("annotations", {})
            block = notes.get(SP_BLOCK, "")
            if notes.get(SCHEDULE_POLICY) != chosen.superpod_policy or not block.isdigit() or int(block) % cards:
                broken.append(f"{where(b, t)}: {SCHEDULE_POLICY}={notes.get(SCHEDULE_POLICY)}, {SP_BLOCK}={block}")
        out.append(_rule("superpod", broken, f"{SCHEDULE_POLICY} {chosen.superpod_policy} and {SP_BLOCK} on every "
                                             "NPU pod"))
    else:
        out.append(Rule("superpod", MET, "not a SuperPoD node type: no SuperPoD annotations"))
    out.append(_rule("scheduler", [where(b, t) for b, t in npu
                                   if (b["spec"].get("schedulerName") if b["kind"] == "ModelServing"
                                       else t["spec"].get("schedulerName")) != "volcano"
                                   or t["metadata"]["labels"].get("ring-controller.atlas") != "ascend-910b"],
                     "schedulerName volcano, ring-controller.atlas: ascend-910b"))
    fieldpath = f"metadata.annotations['{resource}']"
    visible, void = [], []
    for b, t in _templates(bodies):
        for c in [*t["spec"]["containers"], *t["spec"].get("initContainers", [])]:
            value = next((e for e in c.get("env", []) if e["name"] == VISIBLE_DEVICES), {})
            if npu_count(c, resource):
                if value.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != fieldpath:
                    visible.append(f"{where(b, t)} {c['name']}")
            elif value.get("value") != NO_DEVICES:
                void.append(f"{where(b, t)} {c['name']}")
    out.append(_rule("visible-devices", visible, f"{VISIBLE_DEVICES} from {fieldpath} on every NPU container"))
    out.append(_rule("void-devices", void, f"{VISIBLE_DEVICES}={NO_DEVICES} on every container without NPUs"))
    out.append(_rule("whole-server", [f"{where(b, t)} asks for {npu_count(c, resource)} of the node's {cards} NPUs "
                                      "(outside MindCluster's documented vLLM support)"
                                      for b, t in npu for c in t["spec"]["containers"]
                                      if npu_count(c, resource) not in (0, cards)],
                     f"every NPU pod asks for the whole node ({cards} NPUs)"))
    out.append(_rule("one-npu-container", [where(b, t) for b, t in npu
                                           if sum(1 for c in t["spec"]["containers"] if npu_count(c, resource)) > 1],
                     "one NPU container per pod"))
    if options.target == "lws" and any(b["kind"] == "LeaderWorkerSet" and
                                       b["spec"]["leaderWorkerTemplate"]["size"] > 1 for b in bodies):
        out.append(Rule("lws-gang", CLUSTER, "a group's pods are placed together only where the LWS controller runs "
                                             "with gangSchedulingManagement.schedulerProvider: volcano (it then "
                                             "makes a PodGroup per group); the manifests cannot show it"))
    return out


def _operator_writes_ranktable(body: dict) -> bool:
    from deployctl.export.pd_ranktables import ATLAS_TASK_LABEL

    return body["kind"] == "Deployment" and ATLAS_TASK_LABEL in body["metadata"]["labels"]


def _cluster_ranktables(spec: Spec, bodies: list[dict]) -> list[Rule]:
    """The AscendCloud P/D flow: ascend-operator writes each instance's ranktable, every pod merges them."""
    from deployctl.export.pd_ranktables import (ATLAS_TASK_LABEL, DEPLOY_LABEL, HCCL_JSON, INIT_NAME, LOCAL_NAME,
                                                NO_SURGE, rings_name)
    from deployctl.plan.container_types import ranktable_dir
    from deployctl.ranktable.model import MERGED_FILE_NAME

    maps = {b["metadata"]["name"]: b for b in bodies if b["kind"] == "ConfigMap"}
    workloads = {b["metadata"]["labels"].get("deployctl.instance"): b for b in bodies if b["kind"] == "Deployment"}
    instances = spec.role("prefill") + spec.role("decode")
    operator, merged, updates = [], [], []
    for instance in instances:
        body = workloads.get(instance.name)
        if body is None:
            operator.append(f"{instance.name}: no Deployment")
            continue
        name, template = body["metadata"]["name"], body["spec"]["template"]
        wanted = maps.get(rings_name(name), {}).get("data", {}).get(HCCL_JSON, "")
        if ATLAS_TASK_LABEL not in body["metadata"]["labels"]:
            operator.append(f"Deployment {name}: no {ATLAS_TASK_LABEL} label (the operator ignores it)")
        if template["metadata"]["labels"].get(DEPLOY_LABEL) != name:
            operator.append(f"Deployment {name}: its pods lack {DEPLOY_LABEL}: {name} (the operator lists none)")
        if '"initializing"' not in wanted:
            operator.append(f"ConfigMap {rings_name(name)}: missing, or its {HCCL_JSON} is not status initializing")
        if body["spec"].get("strategy") != NO_SURGE:
            updates.append(f"Deployment {name}: {body['spec'].get('strategy')}")
    directory = ranktable_dir(spec)
    for instance in (*instances, spec.scheduler):
        body = workloads.get(instance.name)
        pod = body["spec"]["template"]["spec"] if body else {}
        init = next((c for c in pod.get("initContainers", []) if c["name"] == INIT_NAME), None)
        env = {e["name"]: e.get("value") for c in pod.get("containers", []) for e in c.get("env", [])}
        mounted = {v.get("configMap", {}).get("name") for v in pod.get("volumes", [])}
        missing = [rings_name(i.name) for i in instances if rings_name(i.name) not in mounted]
        if init is None or missing or env.get("GLOBAL_RANK_TABLE_FILE_PATH") != f"{directory}/{MERGED_FILE_NAME}" \
                or env.get("RANK_TABLE_FILE_PATH") != f"{directory}/{LOCAL_NAME}":
            merged.append(f"{instance.name}: " + ("no merge init container" if init is None else
                                                  f"mounts {missing}" if missing else "ranktable paths"))
    return [
        _rule("operator-ranktable", operator, f"a Deployment per P/D instance labelled {ATLAS_TASK_LABEL}, its pods "
                                              f"{DEPLOY_LABEL}, and its rings-config ConfigMap created initializing"),
        _rule("ranktable-merge", merged, "an init step in every P/D and scheduler pod waits for every instance's "
                                         "ranktable and merges them (scheduler, prefill, decode) into the files "
                                         "GLOBAL_RANK_TABLE_FILE_PATH and RANK_TABLE_FILE_PATH name"),
        _rule("ranktable-update", updates, "updates stop the old pod first (maxSurge 0): a surge pod would wait for "
                                           "a ranktable the operator keeps for the old one; the instance is down "
                                           "while it restarts"),
        Rule("ranktable-refresh", CLUSTER, "each pod merges the ranktables once, at its start: a P/D or scheduler "
                                           "pod that is recreated (new IP) leaves the others' global ranktable "
                                           f"naming its old IP; restart them all (`kubectl rollout restart "
                                           f"deployment -l deployctl.deployment={spec.name}`)"),
    ]


def _updates(spec: Spec, options: ExportOptions, bodies: list[dict]) -> list[Rule]:
    from deployctl.servers.shutdown import stop_grace
    from deployctl.spec.startup import startup_budget

    out = []
    servers = [(b, t, c) for b, t in _templates(bodies) for c in t["spec"]["containers"]
               if c.get("resources", {}).get("limits") and t["metadata"]["labels"].get(LABEL_ROLE) != "proxy"]
    name = lambda b, c: f"{b['kind']} {b['metadata']['name']} {c['name']}"
    binds = any(gang.kv_ports for gang in gangs(spec))  # P/D servers without a KV connector bind none
    kv = [(b, t) for b, t in _templates(bodies) if t["metadata"]["labels"].get(LABEL_ROLE) in ("prefill", "decode")
          and binds]
    out.append(_rule("kv-ports", [f"{b['kind']} {b['metadata']['name']}" for b, t in kv
                                  if not any(s["name"] == RESERVED_PORTS
                                             for s in t["spec"].get("securityContext", {}).get("sysctls", []))],
                     f"{RESERVED_PORTS} on every P/D pod" if kv else "no P/D pod binds kv ports"))
    drained = [(b, t, c) for b, t, c in servers if "preStop" in c.get("lifecycle", {})]
    out.append(_rule("drain", [name(b, c) for b, t, c in servers if "preStop" not in c.get("lifecycle", {})],
                     f"a preStop that waits {ENDPOINT_SETTLE_S} s, then until running + waiting = 0 (at most "
                     f"{DRAIN_S} s), on every server container"))
    short = []
    for b, t, c in drained:
        words = [*c.get("command", []), *c.get("args", [])]
        need = ENDPOINT_SETTLE_S + DRAIN_S + stop_grace(words)
        if t["spec"].get("terminationGracePeriodSeconds", 30) <= need:
            short.append(f"{name(b, c)}: {t['spec'].get('terminationGracePeriodSeconds', 30)} s <= {need} s")
    out.append(_rule("grace", short, "terminationGracePeriodSeconds above the drain and the server's own stop"))
    rolling = []
    for b in bodies:
        if b["kind"] == "Deployment" and _operator_writes_ranktable(b):
            continue  # the ranktable-update rule's
        if b["kind"] == "Deployment":
            strategy = b["spec"].get("strategy", {})
            if strategy.get("type") != "RollingUpdate" or strategy.get("rollingUpdate", {}).get("maxUnavailable") != 0:
                rolling.append(f"Deployment {b['metadata']['name']}: {strategy}")
        elif b["kind"] == "LeaderWorkerSet":
            strategy = b["spec"].get("rolloutStrategy", {}).get("rollingUpdateConfiguration", {})
            if strategy.get("maxUnavailable") != 0:
                rolling.append(f"LeaderWorkerSet {b['metadata']['name']}: maxUnavailable "
                               f"{strategy.get('maxUnavailable')}")
    out.append(_rule("rolling", rolling, "a rolling update that starts the new pod before the old one drains"))
    budget = startup_budget(spec).seconds
    late = []
    for b, t, c in servers:
        probe = c.get("startupProbe")
        if probe and probe["periodSeconds"] * probe["failureThreshold"] < budget + STARTUP_MARGIN_S:
            late.append(f"{name(b, c)}: {probe['periodSeconds'] * probe['failureThreshold']} s")
    group = any(b["kind"] in ("LeaderWorkerSet", "ModelServing") for b in bodies)
    out.append(_rule("startup", late, f"start-up probes allow {budget} s ({startup_budget(spec).why}) + "
                                      f"{STARTUP_MARGIN_S} s" + ("; a leader that misses it restarts its whole group"
                                                                 if group else "")))
    return out
