"""A host's facts as the planner reads them, built from plain data for planner tests."""

from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts


def deployed(containers=(), image_id=None, file_hashes=None, health=None) -> HostFacts:
    """HostFacts holding only the deployed state (containers, the image's ID, deployctl's files' hashes)."""
    return HostFacts(deployed=DeployedState(tuple(containers), image_id, file_hashes or {}, health or {}))


def running(spec, image_id="sha256:img", front_list=None) -> dict:
    """Facts of tb1 where every container of `spec` runs with its digest (and the front lists `front_list`)."""
    from dataclasses import replace

    from deployctl.facts.model import ContainerDevices
    from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_DIGEST, container_for
    from deployctl.plan.up import digest_of

    out = []
    for instance in spec.instances:
        container = container_for(spec, instance)
        digest = digest_of(container, f"image:{container.image}" if instance.role == "router" else image_id, None,
                           spec)
        labels = {LABEL_DEPLOYMENT: spec.name, "deployctl.role": instance.role, LABEL_DIGEST: digest}
        out.append(ContainerDevices("id-" + instance.name, instance.name, True, tuple(sorted(labels.items())),
                                    tuple(f"/dev/davinci{n}" for n in instance.devices), tuple(instance.devices), (),
                                    state="running", image_id=image_id, image="img"))
    facts = deployed(tuple(out), image_id)
    return {"tb1": facts if front_list is None else replace(facts, front_list=front_list)}
