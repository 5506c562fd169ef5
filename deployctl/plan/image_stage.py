"""The image stages of `up` and `image build` (pure): pull where missing, or build/ship/skip per host by the
image's inputs label; and the identity each host's containers are digested with."""

from __future__ import annotations

from typing import Mapping, Optional

from deployctl.core import Command
from deployctl.facts.image_state import HostImage
from deployctl.facts.model import HostFacts
from deployctl.image.inputs import BuildInputs, context_tar
from deployctl.image.plan import HostAction, check_compat, plan_image_build
from deployctl.plan.actions import Build, Ship
from deployctl.plan.model import Stage, Step
from deployctl.spec.model import Spec


def image_hosts(spec: Spec) -> list[str]:
    """The hosts that run an instance (the image is needed there)."""
    return [h.name for h in spec.used_hosts]


def plan_pull(spec: Spec, facts: Mapping[str, HostFacts]) -> Stage:
    """Use the image where present; pull it where missing."""
    steps = []
    for host in image_hosts(spec):
        if facts[host].deployed and facts[host].deployed.image_id:
            steps.append(Step(host, "image", "keep", f"{spec.image.name} present"))
        else:
            steps.append(Step(host, "image", "run", f"{spec.image.name} missing: pull",
                              commands=(Command(("docker", "pull", spec.image.name or "")),)))
    return Stage("image", tuple(steps))


def build_actions(spec: Spec, facts: Mapping[str, HostFacts], inputs: BuildInputs) -> tuple[HostAction, ...]:
    """Build, ship or skip per host (and the package's release checked against each host's NPU driver)."""
    images = {host: facts[host].image or HostImage() for host in image_hosts(spec)}
    if spec.platform == "ascend":
        check_compat(inputs.package.version, {h: image.driver for h, image in images.items()})
    return plan_image_build(image_hosts(spec), spec.image.build.where, images, inputs.digest)


def plan_build(spec: Spec, facts: Mapping[str, HostFacts], inputs: BuildInputs,
               actions: tuple[HostAction, ...]) -> tuple[Stage, Stage]:
    """The `image` stage (builds, in parallel) and the `ship` stage (from the builder to the others)."""
    image = spec.image.name or ""
    context = context_tar(inputs.context)
    builds, ships = [], {}
    for action in actions:
        if action.action == "build":
            build = Build(image, spec.image.build.base, action.inputs, inputs, context,
                          str(spec.state_dir / "build-logs" / f"{action.host}.log"))
            builds.append(Step(action.host, "image", "build", action.reason, actions=(build,)))
        elif action.action == "skip":
            builds.append(Step(action.host, "image", "keep", action.reason))
        else:
            ships.setdefault(action.source, []).append(action)
    ship_steps = []
    for source, targets in ships.items():
        built = (facts[source].image or HostImage()) if _skipped(actions, source) else HostImage()
        reason = "; ".join(f"{a.host}: {a.reason.split(': ship from')[0]}" for a in targets)
        ship = Ship(image, tuple(a.host for a in targets), built.size)
        ship_steps.append(Step(source, "ship", "ship", reason, actions=(ship,)))
    changed = [a.host for a in actions if a.action != "skip"]
    summary = f"image: built/shipped on {', '.join(changed)}" if changed else "image: up to date everywhere"
    return Stage("image", tuple(builds)), Stage("ship", tuple(ship_steps), summary=summary)


def _skipped(actions: tuple[HostAction, ...], host: str) -> bool:
    return any(a.host == host and a.action == "skip" for a in actions)


def plan_image_stages(spec: Spec, facts: Mapping[str, HostFacts], inputs: Optional[BuildInputs],
                      skip: frozenset[str]) -> tuple[tuple[Stage, ...], dict[str, Optional[str]]]:
    """(stages, image identity per host): a built image is known by its inputs label, a pulled one by its ID;
    None where that is known only after the image stage ran (a pull)."""
    hosts = image_hosts(spec)
    if spec.image.build and inputs is not None and "image" not in skip:
        actions = build_actions(spec, facts, inputs)
        return plan_build(spec, facts, inputs, actions), {a.host: a.inputs for a in actions}
    if spec.image.build:  # image stage skipped: the image there is used as it is
        return (), {h: (facts[h].image.inputs if facts[h].image else None) or _image_id(facts[h]) for h in hosts}
    ids = {h: _image_id(facts[h]) for h in hosts}
    return (() if "image" in skip else (plan_pull(spec, facts),)), ids


def _image_id(facts: HostFacts) -> Optional[str]:
    return facts.deployed.image_id if facts.deployed else None
