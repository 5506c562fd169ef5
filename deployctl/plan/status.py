"""The contract's `status` instances from the hosts' facts (pure): one row per instance of the spec, plus the
containers of this deployment that the spec no longer names."""

from __future__ import annotations

from typing import Mapping

from deployctl.facts.deployed import DeployedState
from deployctl.facts.model import HostFacts
from deployctl.plan.containers import LABEL_DEPLOYMENT, PREVIOUS_SUFFIX
from deployctl.spec.model import Spec


def status_rows(spec: Spec, facts: Mapping[str, HostFacts]) -> list[dict]:
    deployed = {host: f.deployed or DeployedState() for host, f in facts.items()}
    rows = []
    for instance in spec.instances:
        state = deployed.get(instance.host, DeployedState())
        current = state.container(instance.name)
        health = _health(instance, current, state, facts.get(instance.host))
        rows.append({
            "name": instance.name,
            "role": instance.role,
            "host": instance.host,
            "devices": list(instance.devices),
            "port": instance.port,
            "container": current.id[:12] if current else None,
            "state": current.state if current else "missing",
            "healthy": health == "healthy",
            "health": health,
            "image": current.image_id if current else None,
        })
    wanted = {(i.host, i.name) for i in spec.instances}
    for host, state in deployed.items():
        for container in state.containers:
            if (container.label(LABEL_DEPLOYMENT) == spec.name and (host, container.name) not in wanted
                    and not container.name.endswith(PREVIOUS_SUFFIX)):
                rows.append({"name": container.name, "role": container.label("deployctl.role"), "host": host,
                             "devices": [], "port": None, "container": container.id[:12],
                             "state": container.state, "healthy": False, "health": "unhealthy",
                             "image": container.image_id,
                             "note": "not in the spec (removed by the next up)"})
    return rows


def is_deployed(rows: list[dict]) -> bool:
    """Whether any container of the deployment exists on any host (running or not); `.previous` ones do not count."""
    return any(row["container"] for row in rows)


def _health(instance, current, state: DeployedState, facts) -> str:
    """healthy | hung (its health path answers, a one-token generate does not) | unhealthy."""
    if not (current and current.running):
        return "unhealthy"
    if instance.port is None:  # a headless vllm-ascend server serves no HTTP: running is all it can show
        return "healthy"
    if not state.health.get(instance.port):
        return "unhealthy"
    answers = facts.liveness if facts is not None else None
    if answers is not None and instance.port in answers and not answers[instance.port].generated:
        return "hung"
    return "healthy"
