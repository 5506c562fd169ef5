"""plan_down: remove this deployment's containers (by label, `.previous` ones too) and nothing else (pure)."""

from __future__ import annotations

from typing import Mapping

from deployctl.core import Command
from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts
from deployctl.plan.model import Plan, Stage, Step
from deployctl.plan.up import owned_containers
from deployctl.spec.model import Spec


def plan_down(spec: Spec, facts: Mapping[str, HostFacts]) -> Plan:
    steps = []
    for host in spec.hosts:
        host_facts = facts.get(host.name)
        deployed = host_facts.deployed if host_facts and host_facts.deployed else DeployedState()
        for container in owned_containers(spec, deployed):
            steps.append(Step(host.name, "down", "remove", f"container {container.state}",
                              container=container.name,
                              commands=(Command(("docker", "rm", "--force", container.name)),)))
    return Plan(spec.name, (Stage("down", tuple(steps)),))
