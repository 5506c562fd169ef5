"""The time-to-serve ledger (pure): where the wall time of one `up` went, as phases that add up to it.

Stages run one after another, so the whole is: prepare (lock, gather, plan) + checks (the doctor's) + each stage's
span (its first step's start to its last step's end) + report (the status after it) + other (what lies between
those: the executor's own gaps). A stage's span is its phase; the workers' span is split along its slowest server's
own log (facts/startup_log.py): container start, weights loaded, graph compiled, server ready. Per host, every step
is kept with its own start and length, for the timeline (`status --timeline`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from deployctl.facts.startup_log import StartupMilestones

# The phases in the order they happen, each with its name on screen (ui/timeline.py); `other` last. A ledger lists
# those it saw, in this order.
PHASE_LABELS = {"prepare": "prepare", "checks": "checks", "hooks": "hooks", "image_build": "image build", "image_pull": "image pull",
                "image_ship": "image ship", "weights_sync": "weights sync", "compile_cache": "compile cache",
                "files": "files", "ports": "reserve ports", "stop": "stop old", "container_start": "container start",
                "weights_loaded": "weights loaded", "graph_compiled": "graph compiled", "server_ready": "server ready",
                "contract": "contract", "front_start": "front start", "first_token": "first token",
                "report": "report", "other": "other"}
PHASES = tuple(PHASE_LABELS)
SERVER_PHASES = ("weights_loaded", "graph_compiled", "server_ready")  # from the server's own log, in order
_STAGE_PHASE = {"checks": "checks", "hooks": "hooks", "ship": "image_ship", "weights": "weights_sync", "cache": "compile_cache",
                "files": "files", "ports": "ports",
                "stop": "stop", "contract": "contract", "scheduler": "front_start", "proxy": "front_start",
                "answers": "first_token", "verify": "first_token"}


@dataclass(frozen=True)
class StepSpan:
    """One step as it ran (monotonic seconds on the control machine)."""

    stage: str
    host: str
    start: float
    end: float
    container: Optional[str] = None
    builds: bool = False  # an image step that builds (else it pulls)


@dataclass
class Ledger:
    wall: float
    phases: dict[str, float]
    hosts: dict[str, list[dict]] = field(default_factory=dict)
    instances: dict[str, dict] = field(default_factory=dict)
    # compile caches copied: target host -> key, from, seconds, bytes, via (peer: host to host | controller)
    cache_copies: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> dict:
        """`time_to_serve` in `up --output json` and in the history."""
        copies = {"compile_cache": {"hosts": self.cache_copies, "controller_bytes": sum(
            c.get("bytes", 0) for c in self.cache_copies.values() if c.get("via") == "controller")}}
        return {"wall_s": round(self.wall, 3),
                "phases": {name: round(seconds, 3) for name, seconds in self.phases.items()},
                "hosts": self.hosts, "instances": self.instances, **(copies if self.cache_copies else {})}


def phase_of(span: StepSpan) -> str:
    if span.stage == "image":
        return "image_build" if span.builds else "image_pull"
    if span.stage == "workers":
        return "container_start"
    return _STAGE_PHASE.get(span.stage, span.stage)


def server_split(seconds: float, milestones: Optional[StartupMilestones]) -> dict[str, float]:
    """A server step's length split along its own log: each phase from the previous one's end (the first from the
    container's start), container_start the rest (docker run, the process's boot, the health poll's latency).
    Phases it never printed are left out; times that run backwards count as zero."""
    split: dict[str, float] = {}
    if milestones is None or milestones.started is None:
        return {"container_start": seconds}
    last = milestones.started
    for phase in SERVER_PHASES:
        if phase in milestones.ended:
            split[phase] = max(0.0, milestones.ended[phase] - last)
            last = max(last, milestones.ended[phase])
    used = sum(split.values())
    if used > seconds:  # the host's clock ran ahead of ours: scale to the measured length
        split = {p: s * seconds / used for p, s in split.items()}
        used = seconds
    return {"container_start": seconds - used, **split}


def _covered(spans: list[StepSpan]) -> float:
    """Seconds covered by at least one of the spans (parallel ones count once, the gaps between them not at all)."""
    total, reach = 0.0, None
    for span in sorted(spans, key=lambda s: s.start):
        if reach is None or span.start > reach:
            total, reach = total + (span.end - span.start), span.end
        elif span.end > reach:
            total, reach = total + (span.end - reach), span.end
    return total


def build_ledger(t0: float, t_end: float, spans: list[StepSpan],
                 milestones: Mapping[str, StartupMilestones], instance_hosts: Mapping[str, str],
                 cache_copies: Optional[Mapping[str, dict]] = None) -> Ledger:
    """The ledger of one `up` that started at t0 and ended at t_end (monotonic seconds); `cache_copies`: how each
    host got its compile cache (the executor's outcomes)."""
    wall = max(0.0, t_end - t0)
    phases: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        phases[name] = phases.get(name, 0.0) + max(0.0, seconds)

    stages: dict[str, list[StepSpan]] = {}
    for span in spans:
        stages.setdefault(span.stage, []).append(span)
    first = min((s.start for s in spans), default=t_end)
    last = max((s.end for s in spans), default=t_end)
    add("prepare", first - t0)
    for stage, members in stages.items():
        begin, end = min(s.start for s in members), max(s.end for s in members)
        if stage == "workers":
            slowest = max(members, key=lambda s: s.end)
            split = server_split(slowest.end - slowest.start, milestones.get(slowest.container or ""))
            split["container_start"] += slowest.start - begin
            for name, seconds in split.items():
                add(name, seconds)
        elif stage == "hooks":  # hooks run at several points (pre_up, each wave, post_up): their own time only
            add("hooks", _covered(members))
        elif stage == "image":
            slowest = max(members, key=lambda s: s.end)
            add(phase_of(slowest), end - begin)
        else:
            add(phase_of(members[0]), end - begin)
    add("report", t_end - last if spans else 0.0)
    named = sum(phases.values())
    phases["other"] = max(0.0, wall - named)
    ordered = {name: phases[name] for name in PHASES if name in phases}
    copies = dict(cache_copies or {})
    return Ledger(wall, ordered, _per_host(t0, spans, milestones, copies),
                  _per_instance(spans, milestones, instance_hosts), copies)


def _per_host(t0: float, spans: list[StepSpan], milestones: Mapping[str, StartupMilestones],
              cache_copies: Mapping[str, dict]) -> dict[str, list[dict]]:
    hosts: dict[str, list[dict]] = {}
    for span in sorted(spans, key=lambda s: s.start):
        if not span.host:  # the control machine's own work (the doctor's checks on every host at once)
            continue
        rows = hosts.setdefault(span.host, [])
        offset = span.start - t0
        pieces = (server_split(span.end - span.start, milestones.get(span.container or ""))
                  if span.stage == "workers" else {phase_of(span): span.end - span.start})
        for name, seconds in pieces.items():
            row = {"phase": name, "start_s": round(offset, 3), "seconds": round(seconds, 3)}
            if span.container:
                row["instance"] = span.container
            rows.append(row)
            offset += seconds
    # A compile cache copied to a host is the step of the host it came from: the copy's row goes on the target too,
    # from that step's start for as long as its copy took.
    for target, copy in sorted(cache_copies.items()):
        giver = next((s for s in spans if s.stage == "cache" and s.host == copy.get("from")), None)
        if giver is not None:
            rows = hosts.setdefault(target, [])
            rows.append({"phase": "compile_cache", "start_s": round(giver.start - t0, 3),
                         "seconds": round(copy.get("seconds", 0.0), 3), "from": copy["from"]})
            rows.sort(key=lambda r: r["start_s"])
    return hosts


def _per_instance(spans: list[StepSpan], milestones: Mapping[str, StartupMilestones],
                  instance_hosts: Mapping[str, str]) -> dict[str, dict]:
    out = {}
    for span in spans:
        if span.stage != "workers" and span.stage not in ("scheduler", "proxy"):
            continue
        name = span.container or ""
        split = server_split(span.end - span.start, milestones.get(name))
        out[name] = {"host": instance_hosts.get(name, span.host),
                     **{f"{phase}_s": round(seconds, 3) for phase, seconds in split.items()},
                     "source": "server log" if len(split) > 1 else "deployctl"}
    return out


def sums_to_wall(ledger: Ledger, tolerance: float = 0.05) -> bool:
    """The phases add up to the measured wall time within `tolerance` (a fraction of it)."""
    return abs(sum(ledger.phases.values()) - ledger.wall) <= tolerance * max(ledger.wall, 1e-9)
