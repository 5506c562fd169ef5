"""Issue 30's acceptance, read from every pod template of every Ascend playbook x target x stack that exports:
an in-memory /dev/shm of the planned size in every server container, and NPU counts per container that add up
to the NPUs the pod's ranks use on their host."""

from __future__ import annotations

import pytest

from deployctl.export.gangs import gangs
from deployctl.export.objects import pod_labels
from deployctl.export.pods import SHM_VOLUME, shm_bytes
from deployctl.export.render import export
from deployctl.export.servers import networks
from deployctl.export.stacks import pod_templates
from deployctl.servers.vllm_ascend.whole_nodes import one_container_per_pod
from deployctl.plan.containers import LABEL_INSTANCE, container_for
from tests.export.cases import load, options, stacked_cases

ASCEND = [case for case in stacked_cases() if load(case[0]).platform == "ascend"]
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def size(quantity: str) -> int:
    return int(quantity[:-2]) * UNITS[quantity[-2:]] if quantity[-2:] in UNITS else int(quantity)


def expected_pods(spec, opts) -> dict[str, tuple[int, int]]:
    """Each pod template's instance label -> (NPUs its ranks use, the /dev/shm bytes `up` would give them)."""
    nets = networks(spec, opts)
    out = {}
    for gang in gangs(spec):
        for pod in gang.pods[:2]:  # the leader and the template every worker shares
            containers = [container_for(spec, i, None, nets) for i in pod.instances]
            out[pod_labels(spec, gang, pod)[LABEL_INSTANCE]] = (
                sum(len(i.devices) for i in pod.instances),
                sum(shm_bytes(c.shm_size) for c in containers if c.shm_size))
    return out


@pytest.mark.parametrize("spec,target,stack", ASCEND)
def test_every_npu_pod_has_its_shared_memory_and_its_npus(spec, target, stack):
    loaded = load(spec)
    opts = options(spec, target, stack)
    expected = expected_pods(one_container_per_pod(loaded, opts.stack), opts)
    seen = set()
    for manifest in export(loaded, opts):
        for template, _ in pod_templates(manifest.body):
            pod = template["spec"]
            counts = [int(c.get("resources", {}).get("limits", {}).get(opts.device_resource, 0))
                      for c in pod["containers"]]
            if not any(counts):  # the proxy: no NPUs, no /dev/shm of its own
                continue
            label = template["metadata"]["labels"][LABEL_INSTANCE]
            npus, shm = expected[label]
            seen.add(label)
            assert sum(counts) == npus, label
            (volume,) = [v for v in pod["volumes"] if v["name"] == SHM_VOLUME]
            assert volume["emptyDir"]["medium"] == "Memory" and size(volume["emptyDir"]["sizeLimit"]) == shm > 0
            for container, count in zip(pod["containers"], counts):
                if count:  # a server container
                    mounts = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
                    assert [m["name"] for m in mounts] == [SHM_VOLUME], (label, container["name"])
    assert seen == set(expected)  # no NPU pod went unread
