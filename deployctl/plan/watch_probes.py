"""What one `deployctl watch` probe asks a host (one batch: one round trip) and the observations it makes of the
answers (pure): the containers, each API server's health code and /metrics, the one-token generate `status` sends
to each engine server, and each container's log lines since the last probe, matched against the known errors."""

from __future__ import annotations

from typing import Mapping, Optional

from deployctl.diagnose.redact import redact_text
from deployctl.diagnose.signatures import Text, match
from deployctl.facts.deployed import DeployedState, deployed_probe
from deployctl.facts.liveness import liveness_probe
from deployctl.facts.model import HostFacts
from deployctl.facts.probe import Probe
from deployctl.facts.progress import NewLines, ServerProgress, logs_probe, progress_probe
from deployctl.plan.probes import health_path
from deployctl.plan.watch import Observation
from deployctl.servers import flavour_of
from deployctl.spec.model import Instance, Spec

LOG_KIND = "log"  # the signatures looked for in container logs (data/signatures.json `sources`)


def is_front(spec: Spec, instance: Instance) -> bool:
    return spec.front is not None and instance.name == spec.front.name


def watch_probes(spec: Spec, host: str, since: Mapping[str, Optional[str]], hang_timeout: float) -> tuple[Probe, ...]:
    """`since`: container name -> the newest log stamp already read there (None: none yet)."""
    here = [i for i in spec.instances if i.host == host]
    if not here:
        return ()
    probes = [deployed_probe("", (), ())]
    served = tuple((i.port, health_path(spec, i)) for i in here if i.port is not None)
    if served:
        # a server busy enough to answer its health path late is still alive: its reads wait as long as the
        # one-token generate may (at least 2 s)
        probes.append(progress_probe(served, max(2.0, hang_timeout)))
    engines = tuple(i.port for i in here if i.port is not None and not is_front(spec, i))
    asked = flavour_of(spec).liveness_request(spec) if engines else None
    if asked is not None:
        path, body = asked
        probes.append(liveness_probe(tuple((port, path) for port in engines), body, hang_timeout))
    probes.append(logs_probe({i.name: since.get(i.name) for i in here}))
    return tuple(probes)


def observe(spec: Spec, host: str, facts: Optional[HostFacts], now: float,
            known_ids: Mapping[str, Optional[str]], secrets: tuple[str, ...] = ()) -> list[Observation]:
    """One Observation per instance on `host` from its facts, as facts/assemble.py `host_facts_from` made them of
    the answers (None: the host did not answer; a probe that failed leaves its part unknown). `known_ids`:
    container name -> the ID of the last probe; a log line of another container (one an `up` replaced) only sets
    the baseline. Every text of the host's that an observation quotes (a known error's log line, the Docker
    daemon's error) passes through diagnose's redaction with the spec's `secrets` (redact.py secret_values)."""
    here = [i for i in spec.instances if i.host == host]
    if facts is None:
        return [Observation(i.name, host, now, "unreachable") for i in here]
    if facts.deployed is None:  # the host answered, its Docker daemon did not
        lines = (facts.probe_error("deployed") or "").strip().splitlines()
        said = redact_text(lines[-1], secrets)[:200] if lines else ""
        detail = "its Docker daemon did not answer" + (f" ({said})" if said else "")
        return [Observation(i.name, host, now, "unreachable", detail=detail) for i in here]
    deployed: DeployedState = facts.deployed
    progress: Mapping[int, ServerProgress] = facts.progress or {}
    liveness = facts.liveness or {}
    logs: Mapping[str, NewLines] = facts.new_log_lines or {}
    out = []
    for instance in here:
        container = deployed.container(instance.name)
        if container is None:
            out.append(Observation(instance.name, host, now, "missing"))
            continue
        served = progress.get(instance.port) if instance.port is not None else None
        new = logs.get(instance.name)
        same = known_ids.get(instance.name) == container.id
        found = ()
        if new is not None and new.lines and same:
            text = "\n".join(line for _, line in new.lines)
            found = tuple((hint.id, redact_text(hint.line, secrets))
                          for hint in match([Text(host, instance.name, LOG_KIND, text)]))
        out.append(Observation(
            instance.name, host, now, container.state, container.id, exit_code=container.exit_code,
            health_code=(served.health_code if served else 0) if instance.port is not None else None,
            liveness=liveness.get(instance.port) if instance.port is not None and not is_front(spec, instance)
            else None,
            engines=dict(served.engines) if served else {}, signatures=found, started=container.started_at))
    return out
