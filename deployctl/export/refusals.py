"""What a target cannot express, each said at the spec path that asks for it (pure): never a silent drop."""

from __future__ import annotations

from typing import Iterator

from deployctl.errors import Problem
from deployctl.export import k8s_names
from deployctl.export.gang_types import Gang
from deployctl.export.gangs import gangs
from deployctl.export.objects import pod_labels
from deployctl.export.options import ExportOptions
from deployctl.export.stacks import NODE_TYPES
from deployctl.fronts import front_kind
from deployctl.plan.containers import LABEL_INSTANCE
from deployctl.servers import flavour_of
from deployctl.servers.features import spec_refusals
from deployctl.spec.model import EnvVar, Spec
from deployctl.spec.secret_names import looks_secret

# What the Ascend device plugin (with Volcano's NPU scheduling) hands one container on an 8- or 16-card node.
ASCEND_COUNTS = (1, 2, 4, 8, 16)
MAX_LABEL = k8s_names.DNS1123_LABEL_MAX
# Room the controllers add to a gang's name for its pods: LWS `-<group>-<worker>`, Kthena `-<g>-<role>-<r>-<w>`.
POD_SUFFIX = {"k8s": len("-0123456789-abcde"), "lws": len("-0-00"), "kthena": len("-0-decode0-0-00")}
HOST_FACTS = ("HCCL_IF_IP",)  # a host's address: a pod has its own (status.podIP)


def problems(spec: Spec, options: ExportOptions) -> list[Problem]:
    """Every reason this spec cannot become `options.target`'s objects, all at once."""
    flavour = flavour_of(spec)
    refused = [*spec_refusals(flavour, spec), *flavour.export_refusals(spec, options.npu_stack), *_front(spec),
               *_hooks(spec), *_ranktables(spec, options)]
    if refused:
        return refused
    bad_name = list(_name(spec))
    found = [*bad_name, *_image(spec, options), *_weights(spec, options), *_env(spec, options),
             *_stack(spec, options)]
    for gang in gangs(spec):
        found += [*_devices(spec, gang, options), *_gang(spec, gang, options)]
        if not bad_name:  # the names derived from a bad deployment name would only repeat its error
            found += _names(spec, gang, options)
    return found


def _front(spec: Spec) -> Iterator[Problem]:
    """A front that is deployctl's own on hosts (vLLM's router in front of mixed servers): on a cluster the
    Service every target makes fronts the servers (its kind says so, fronts/)."""
    kind = front_kind(spec.front_spec.kind) if spec.front_spec is not None else None
    refusal = kind.export_refusal(spec) if kind is not None else None
    if refusal is not None:
        yield Problem(("topology", "front"), refusal[0], hint=refusal[1])


def _ranktables(spec: Spec, options: ExportOptions) -> Iterator[Problem]:
    """The AscendCloud P/D flow on MindCluster: ascend-operator writes a ranktable for the pods of a Deployment,
    a StatefulSet or a Volcano Job only (mind-cluster component/ascend-operator/pkg/ranktable/plugins.go: the
    deployment, statefulSet and vcJob plugins), so LWS and Kthena pods would never get one."""
    from deployctl.export import pd_ranktables

    if pd_ranktables.applies(spec, options) and options.target != "k8s":
        yield Problem(("topology",), f"the AscendCloud P/D flow needs each instance's HCCL ranktable from "
                                     f"MindCluster's ascend-operator, which writes one for the pods of a "
                                     f"Deployment, StatefulSet or Volcano Job only, never for a "
                                     f"{'LeaderWorkerSet' if options.target == 'lws' else 'ModelServing'}'s pods",
                      hint="export with --to k8s: a Deployment per instance, whose ranktable the operator writes "
                           "and an init step in every pod merges")


def _hooks(spec: Spec) -> Iterator[Problem]:
    """Hooks run around `up`, `down` and rollout waves on the control machine or the hosts; on a cluster the
    controllers apply and update the objects, and nothing runs deployctl's steps to hang them on."""
    for hook in spec.hooks:
        yield Problem(hook.path or ("hooks", hook.point),
                      f"hooks.{hook.point} is not exported: on a cluster no `up`, `down` or rollout wave of "
                      "deployctl's runs for it to run around",
                      hint="remove hooks from a copy of the spec to export it (a pod's own lifecycle hooks and "
                           "init containers are the cluster's way)")


def _name(spec: Spec) -> Iterator[Problem]:
    """The deployment's name names its Services (ValidateServiceName: a DNS-1035 label) and is a label value."""
    broken = k8s_names.dns1035_label(spec.name) or k8s_names.label_value(spec.name)
    if broken:
        yield Problem(("name",), f"{spec.name!r} names the Kubernetes Service of this deployment, and a Service "
                                 f"name {broken}", hint="start and end the name with a letter (or end with a digit)")


def _stack(spec: Spec, options: ExportOptions) -> Iterator[Problem]:
    """A stack that places NPU pods by node type must know the spec's: no guessed accelerator-type, and a
    --node-type whose nodes have requirements.cards NPUs and that vLLM runs on."""
    stack = options.stack
    if spec.platform != "ascend" or not stack.accelerator_types:
        return
    cards = spec.requirements.cards
    if options.node_type is None:
        if stack.refuses(cards):
            known = ", ".join(f"{n} ({name})" for n, name in stack.accelerator_types)
            yield Problem(("requirements", "cards"), f"{cards} NPUs a node: --npu-stack {stack.name} places NPU pods "
                                                     f"by the node label accelerator-type, known for {known} NPUs a "
                                                     f"node only",
                          hint="set requirements.cards to the nodes' NPU count, pass --node-type, or export with "
                               "--npu-stack plain or cce")
        return
    chosen = NODE_TYPES[options.node_type]
    if chosen.unsupported:
        yield Problem(("requirements", "cards"), f"--node-type {chosen.label} is {chosen.unsupported}",
                      hint="export for the nodes vLLM runs on: " + ", ".join(
                          f"{t.label} ({t.cards} NPUs)" for t in NODE_TYPES.values() if not t.unsupported))
    elif chosen.cards != cards:
        fits = [t.label for t in NODE_TYPES.values() if t.cards == cards and not t.unsupported]
        yield Problem(("requirements", "cards"), f"requirements.cards is {cards}, and a --node-type {chosen.label} "
                                                 f"node ({chosen.hardware}) has {chosen.cards} NPUs: its pods would "
                                                 f"ask for NPUs the node does not have, or leave some idle",
                      hint=(f"use --node-type {' or '.join(fits)}" if fits else "no documented node type has "
                            f"{cards} NPUs") + f", or set requirements.cards to {chosen.cards}")


def _image(spec: Spec, options: ExportOptions) -> Iterator[Problem]:
    if not spec.image.name and not options.image:
        yield Problem(("image", "name"), "no image to run: the cluster pulls image.name", hint="set image.name")
    elif spec.image.build is not None and not options.image:
        yield Problem(("image", "build"), f"{spec.image.name} is built on the hosts by deployctl, and a cluster "
                                          "can only pull an image from a registry",
                      hint="push it (`docker push`) and pass --image REGISTRY/NAME:TAG")


def _weights(spec: Spec, options: ExportOptions) -> Iterator[Problem]:
    if not spec.weights.dest:
        yield Problem(("weights", "dest"), "no model directory: every server reads weights.dest",
                      hint="set weights.dest (the path the servers are given)")
    elif not options.weights_pvc and not options.weights_hostpath:
        yield Problem(("weights", "dest"), f"{spec.weights.dest} (the weights every server reads) needs a volume "
                                           "on the cluster", hint="pass --weights-pvc CLAIM (a PersistentVolumeClaim "
                                                                  "holding the model) or --weights-hostpath PATH "
                                                                  "(the model's directory on every node)")


def _env(spec: Spec, options: ExportOptions) -> Iterator[Problem]:
    places = [(("env", e.name), e) for e in spec.env]
    for gang in gangs(spec):  # a DP group's own env (other servers have none)
        places += [(gang.path + ("env", e.name), e) for e in gang.leader.instances[0].env]
    for path, var in places:
        yield from _one_env(path, var, options)


def _one_env(path: tuple, var: EnvVar, options: ExportOptions) -> Iterator[Problem]:
    if var.name in HOST_FACTS:
        yield Problem(path, f"{var.name}={var.display} names a host's address, and a pod has its own",
                      hint="leave it out: the export sets it from the pod's IP (status.podIP)")
    elif var.is_secret and not options.secret:
        yield Problem(path, f"{var.display} is a secret and goes into the manifests as a secretKeyRef only",
                      hint=f"create a Secret holding the key {var.name} and pass --secret NAME")
    elif not var.is_secret and looks_secret(var.name):  # it would be in the manifest for anyone who reads it
        yield Problem(path, f"{var.name} looks like a secret and would be written into the manifests in the clear",
                      hint=f"write it as ${{{var.name}}} (then it becomes a secretKeyRef of --secret NAME)")


def _devices(spec: Spec, gang: Gang, options: ExportOptions) -> Iterator[Problem]:
    """A container asks for a count of NPUs; a count the device plugin cannot allocate is not expressible, nor,
    on a stack that schedules whole servers (MindCluster), part of a node."""
    if spec.platform != "ascend":
        return
    cards = spec.requirements.cards
    for path, shown, count in _pod_npus(gang):
        if count and count not in ASCEND_COUNTS:
            yield Problem(path, f"{shown}, and {options.device_resource} is allocated to a container in counts of "
                                f"{', '.join(map(str, ASCEND_COUNTS))} only",
                          hint="choose a device count of 1, 2, 4, 8 or 16")
        elif count and count != cards and options.stack.whole_servers:
            yield _part_of_node(path, shown, cards, options)
        if count and count != cards and options.stack.whole_servers:
            return  # one pod says it for the gang


def _pod_npus(gang: Gang) -> Iterator[tuple[tuple, str, int]]:
    """(spec path, what it asks for, NPU count) of each of the gang's leader's containers."""
    key, shape = gang.npus or ("devices", None)
    for instance in gang.leader.instances:
        count = len(instance.devices)
        shown = f"{shape} is {count} NPUs per pod" if shape else f"{list(instance.devices)} is {count} NPUs"
        yield gang.path + (key,), shown, count


def _part_of_node(path: tuple, shown: str, cards: int, options: ExportOptions) -> Problem:
    # mind-cluster docs/en/scheduling/usage/vllm_best_practice/01_deploying_vllm_inference_job.md, "YAML
    # Parameter Description": huawei.com/Ascend910 "only full-server scheduling is supported"
    return Problem(path, f"{shown} of a node's {cards} (requirements.cards), and --npu-stack "
                         f"{options.stack.name} asks for whole servers: MindCluster's vLLM guide supports "
                         f"full-server scheduling only ({options.device_resource})",
                   hint=f"give each pod all {cards} NPUs of its node (a group's ranks on one host x tp = "
                        f"{cards}), or export with --npu-stack plain or cce")


def part_of_node(spec: Spec, options: ExportOptions) -> list[Problem]:
    """Each gang whose pods ask for part of a node on a stack that schedules whole servers (none of its node types
    fits them), said whether or not the export is refused for something else too."""
    if spec.platform != "ascend" or not options.stack.whole_servers:
        return []
    spec = flavour_of(spec).export_spec(spec, options.stack)  # as the export places a host's ranks
    cards, found = spec.requirements.cards, []
    for gang in gangs(spec):
        partial = [(path, shown) for path, shown, count in _pod_npus(gang) if count and count != cards]
        if partial:  # one pod says it for the gang
            found.append(_part_of_node(*partial[0], cards, options))
    return found


def node_type(spec: Spec, options: ExportOptions) -> list[Problem]:
    """Why the stack's node types do not fit the spec's card count (or --node-type), if they do not."""
    return list(_stack(spec, options))


def _gang(spec: Spec, gang: Gang, options: ExportOptions) -> Iterator[Problem]:
    if len(gang.pods) < 2:
        return
    hosts = gang.path + ("hosts",)
    if options.target == "k8s":
        yield Problem(hosts, f"a DP group over {len(gang.pods)} hosts must start and restart as one, and plain "
                             "Kubernetes has no gang (a Deployment per host would start ranks alone)",
                      hint="export with --to lws or --to kthena, or keep the group on one host")
    else:
        refusal = flavour_of(spec).gang_refusal(spec, options.target)
        if refusal is not None:
            yield Problem(hosts, refusal[0], hint=refusal[1])


def _names(spec: Spec, gang: Gang, options: ExportOptions) -> Iterator[Problem]:
    """Object and pod names are DNS labels, and a pod's instance label is a label value (IsValidLabelValue): a
    host name in them must fit those rules too, and they must stay short."""
    room = MAX_LABEL - POD_SUFFIX[options.target]
    for pod in gang.pods:
        name = pod.name if options.target == "k8s" else gang.name
        label = pod_labels(spec, gang, pod)[LABEL_INSTANCE]
        broken = k8s_names.label_value(label)
        if k8s_names.DNS1123_LABEL.fullmatch(name) and len(name) <= room and not broken:
            continue
        # internal launch names a pod after its host: then the host is what to change
        path, fix = (("hosts", pod.host), "rename the host") if pod.host in name + label else (("name",), "shorten name")
        if not k8s_names.DNS1123_LABEL.fullmatch(name):
            yield Problem(path, f"{pod.host!r} becomes part of the Kubernetes name {name!r}, which must be "
                                "lower-case letters, digits and '-'", hint=fix)
        elif len(name) > room:
            yield Problem(path, f"{name!r} is too long for a Kubernetes name once the controller adds its suffix "
                                f"(at most {room} characters)", hint=fix)
        else:
            yield Problem(path, f"{label!r}, the pod's {LABEL_INSTANCE} label, {broken}", hint=fix)
        return
