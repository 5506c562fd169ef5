"""The AscendCloud P/D flow (server: vllm, mode: disaggregated) on MindCluster as plain Kubernetes objects (pure):
the cluster writes each instance's ranktable and an init step in every pod merges them as `up` does.

ascend-operator writes the ranktable of a Deployment's pods (the NPUs the device plugin gave them) into the
ConfigMap `rings-config-<Deployment>` under `hccl.json`, for a Deployment labelled `ring-controller.atlas` whose
pods carry `deploy-name: <Deployment>`; the user creates the ConfigMap with `status: initializing` (mind-cluster
component/ascend-operator/pkg/ranktable/plugins.go deploymentPlugin, pkg/controllers/v1/consts.go configmapPrefix,
deployLabelKey, configmapKey; pod.go writeRanktableToCm; docs/en/scheduling/api/hccl.json_file_description.md and
docs/en/scheduling/usage/basic_scheduling/03_full_npu_scheduling_and_static_vnpu_scheduling_training.md, the
ConfigMap created with the job). It does so for Deployments, StatefulSets and Volcano Jobs only, so this shape is
`--to k8s`: a Deployment per instance (one pod, the whole node), the scheduler's Deployment, a headless Service
that gives the P/D pods the scheduler's IP, and the public Service in front of the scheduler. Never two instances a
pod: in Volcano mode the device plugin gives a pod's NPUs to its first NPU container only, all of them (mind-cluster
component/ascend-device-plugin/pkg/server/plugin.go checkAnnotationAllocateValid, getOldestPod), so instances that
share a server cannot each have NPUs of their own (the seed's playbook runs one a server).

Every P/D pod and the scheduler's mount every instance's ConfigMap; an init container runs deployctl's merge
program (deployctl/incluster/pd_ranktable_merge.py, shipped in a ConfigMap and run by the image's python: the
vendor image has no deployctl) that waits for all of them, writes the global and the pod's local ranktable into
an emptyDir the server reads (GLOBAL_RANK_TABLE_FILE_PATH, RANK_TABLE_FILE_PATH), and in the scheduler's pod waits
for the instances to serve, as the runbook starts the scheduler last."""

from __future__ import annotations

from importlib import resources

from deployctl.export.objects import deployment, labels, metadata, pod_labels
from deployctl.export.gangs import gangs
from deployctl.export.options import CARDLESS_CPU, CARDLESS_MEMORY, ExportOptions
from deployctl.export.pods import POD_IP, STARTUP_MARGIN_S, container_name, k8s_container, pod_spec
from deployctl.export.ranks import LEADER_RETRY_S, LEADER_WAIT_S
from deployctl.export.servers import networks
from deployctl.export.stacks import NO_DEVICES, VISIBLE_DEVICES
from deployctl.plan.containers import container_for
from deployctl.plan.container_types import RanktableFiles, ranktable_dir
from deployctl.plan.probes import health_path
from deployctl.ranktable.model import MERGED_FILE_NAME
from deployctl.spec.model import Instance, Spec
from deployctl.spec.startup import startup_budget

SCRIPT_PACKAGE = "deployctl.incluster"
SCRIPT_NAME = "pd_ranktable_merge.py"
SCRIPT_DIR = "/opt/deployctl/merge"
RINGS_DIR = "/opt/deployctl/rings"
RINGS_PREFIX = "rings-config-"  # ascend-operator consts.go configmapPrefix
HCCL_JSON = "hccl.json"  # consts.go configmapKey
DEPLOY_LABEL = "deploy-name"  # consts.go deployLabelKey: the operator lists a Deployment's pods by it
ATLAS_TASK_LABEL = "ring-controller.atlas"  # ascend-common api/consts.go AtlasTaskLabel, on the Deployment
# What the docs create the ConfigMap with; the operator replaces it once every pod of the Deployment is placed.
INITIALIZING = '{\n    "status":"initializing"\n}\n'
LOCAL_NAME = "local_ranktable.json"  # the merge program's: a pod's IP is not known when the export is written
INIT_NAME = "ranktable-merge"
SCRIPT_VOLUME = "ranktable-merge"
# An update stops the old pod (drained by its preStop) before the new one starts. A surge would deadlock: while a
# one-replica Deployment has two placed pods, the operator keeps the ranktable of the old one
# (pod.go handleCompletedRankTable: "more allocated pods than replicas ... keep the current ranktable intact"), so
# the new pod's init step waits for its own entry, and the old pod goes only once the new one is ready.
NO_SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def applies(spec: Spec, options: ExportOptions) -> bool:
    """True for an AscendCloud P/D spec exported for MindCluster (the only stack whose cluster writes them)."""
    from deployctl.servers import flavour_of

    return flavour_of(spec).uses_ranktables(spec) and options.npu_stack == "mindcluster"


def rings_name(deployment_name: str) -> str:
    return RINGS_PREFIX + deployment_name


def script_text() -> str:
    """The merge program as shipped in the package (a resource read, as ranktable/schema.py reads its schema)."""
    from deployctl.export.render import Block

    return Block(resources.files(SCRIPT_PACKAGE).joinpath(SCRIPT_NAME).read_text("utf-8"))


def build(spec: Spec, options: ExportOptions) -> list[dict]:
    """ConfigMaps (the program, then each instance's rings-config), the Deployments (prefill, decode, the
    scheduler), the scheduler's headless Service and the public one."""
    scheduler = spec.scheduler
    instances = [g.leader.instances[0] for g in gangs(spec)]  # prefill then decode: the global order
    files = RanktableFiles(MERGED_FILE_NAME, {i.name: LOCAL_NAME for i in (*instances, scheduler)}, {})
    out = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(f"{spec.name}-{INIT_NAME}",
                                                                          labels(spec), options),
            "data": {SCRIPT_NAME: script_text()}}]
    for instance in instances:
        tagged = {**labels(spec, instance.role, instance.name), ATLAS_TASK_LABEL: _job_kind(options)}
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(rings_name(instance.name), tagged,
                                                                                  options),
                    "data": {HCCL_JSON: INITIALIZING}})
    for gang in gangs(spec):
        instance = gang.leader.instances[0]
        pod_labels_ = {**pod_labels(spec, gang, gang.leader), DEPLOY_LABEL: instance.name}
        body = deployment(spec, instance.name, pod_labels_, _pod(spec, instance, instances, files, options), options)
        body["metadata"]["labels"][ATLAS_TASK_LABEL] = _job_kind(options)
        body["spec"]["strategy"] = NO_SURGE
        out.append(body)
    sched_labels = labels(spec, scheduler.role, scheduler.name)
    sched_pod = _pod(spec, scheduler, instances, files, options)
    sched_pod["nodeSelector"] = options.stack.node_selector(spec.requirements.cards, options.node_type)
    out.append(deployment(spec, scheduler.name, sched_labels, sched_pod, options))
    port = [{"name": "http", "port": scheduler.port, "targetPort": "http", "protocol": "TCP"}]
    # Headless and publishing not-ready pods: the P/D pods' init steps resolve the scheduler's IP while its own
    # init step still waits for them (kubernetes.io/docs/concepts/services-networking/service/#headless-services;
    # ServiceSpec.publishNotReadyAddresses).
    out.append({"apiVersion": "v1", "kind": "Service",
                "metadata": metadata(scheduler.name, labels(spec, scheduler.role), options),
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": sched_labels, "ports": port}})
    out.append({"apiVersion": "v1", "kind": "Service", "metadata": metadata(spec.name, labels(spec), options),
                "spec": {"selector": labels(spec, scheduler.role), "ports": port}})
    return out


def _job_kind(options: ExportOptions) -> str:
    return dict(options.stack.labels)[ATLAS_TASK_LABEL]


def _pod(spec: Spec, instance: Instance, instances: list[Instance], files: RanktableFiles,
         options: ExportOptions) -> dict:
    """One pod: the server as `up` runs it with the ranktables the init step writes into an emptyDir."""
    container = container_for(spec, instance, files, networks(spec, options))
    out = pod_spec(spec, [(container, k8s_container(spec, container, options, container_name(0)))], options)
    directory = ranktable_dir(spec)
    volumes = []
    for volume in out.get("volumes", []):
        if volume.get("hostPath", {}).get("path") == directory:  # the host's ranktables under `up`
            shared = volume["name"]
            volume = {"name": shared, "emptyDir": {}}
        volumes.append(volume)
    mounts = [{"name": SCRIPT_VOLUME, "mountPath": SCRIPT_DIR, "readOnly": True}]
    volumes.append({"name": SCRIPT_VOLUME, "configMap": {"name": f"{spec.name}-{INIT_NAME}"}})
    rings = []
    for n, peer in enumerate(instances):
        name, path = f"rings-{n}", f"{RINGS_DIR}/{peer.name}"
        volumes.append({"name": name, "configMap": {"name": rings_name(peer.name)}})
        mounts.append({"name": name, "mountPath": path, "readOnly": True})
        rings += ["--instance", peer.role, peer.name, path]
    mounts.append({"name": shared, "mountPath": directory})
    args = [*rings, "--scheduler", spec.scheduler.name, "--own", instance.name, "--pod-ip", f"$({POD_IP})",
            "--out", directory, "--wait-s", str(LEADER_WAIT_S), "--retry-s", str(LEADER_RETRY_S)]
    if instance.name == spec.scheduler.name:  # the scheduler waits for the servers, they for its address
        args += ["--health", health_path(spec, instances[0]), "--node-ports", ",".join(map(str, spec.node_ports)),
                 "--health-wait-s", str(startup_budget(spec).seconds + STARTUP_MARGIN_S)]
    else:
        args += ["--scheduler-address", spec.scheduler.name]
    out["initContainers"] = [{
        "name": INIT_NAME, "image": options.image or container.image,
        "command": ["python3", f"{SCRIPT_DIR}/{SCRIPT_NAME}", *args],
        "env": [{"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": VISIBLE_DEVICES, "value": NO_DEVICES}],  # it needs no NPU: the runtime mounts none
        "resources": {"requests": {"cpu": CARDLESS_CPU, "memory": CARDLESS_MEMORY}},
        "volumeMounts": mounts}]
    out["volumes"] = volumes
    return out
