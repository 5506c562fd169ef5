"""Drain-and-replace as plan data (issue 31, pure): when `up` replaces serving containers behind a front that can
change its list, each instance (a vllm-ascend DP group: all its ranks, which fail together) is taken out of the
front, drained, stopped gracefully, replaced on the same devices, checked (contract, answers) and put back, in
waves of `rollout.max_unavailable` per role. The executor runs the waves as stages; a wave's last stage commits it.

Without such a front (none, the AscendCloud scheduler, a proxy before v0.13) the replacement is `recreate`: every
changed container stops, then every new one starts; the plan says that it leaves a gap and how long."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Optional

from deployctl.facts.deployed import DeployedState
from deployctl.plan.actions import AnswerCheck, AwaitListed, Drain
from deployctl.plan.front import Backend, Front, add_commands, backends, front_of, list_command, remove_commands
from deployctl.plan.model import Stage, Step
from deployctl.spec.model import Instance, Spec

DEFAULT_DRAIN_TIMEOUT = 120.0  # seconds a drained instance may take to finish its requests (--drain-timeout)
DEFAULT_SHUTDOWN_TIMEOUT = 30  # seconds `docker stop` gives a server to finish before SIGKILL (--shutdown-timeout)
WAVE_STAGES = ("stop", "workers", "contract")  # a replaced unit's steps in these move into its wave


@dataclass(frozen=True)
class RolloutOptions:
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    answer_tokens: int = 8  # 0: no answer check per wave
    answer_timeout: float = 120.0
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT


@dataclass(frozen=True)
class Spare:
    """What a host has free for surge: cards no container holds and the spec does not use, ports in use."""

    cards: tuple[int, ...] = ()
    ports: frozenset[int] = frozenset()


SURGE_SUFFIX = "-surge"
SURGE_PORT_OFFSET = 1000  # a surge server listens above its instance's port, on the first port free there


@dataclass(frozen=True)
class Unit:
    """What goes out of the front together: one instance, or one DP group (every rank)."""

    role: str
    label: str
    containers: tuple[str, ...]  # the containers replaced
    backends: tuple[Backend, ...]  # the API servers the front routes to


def strategy_of(spec: Spec, front: Optional[Front]) -> str:
    """`rollout.strategy`, else drain where the front can change its list, else recreate."""
    if spec.rollout.strategy:
        return spec.rollout.strategy
    return "drain" if front is not None and front.changes_list else "recreate"


def units_of(spec: Spec, address_of: Mapping[str, str]) -> dict[str, list]:
    """Every unit of the spec by its key (an instance's name, or `role group N`), with its instances."""
    out: dict[str, list] = {}
    for instance in spec.instances:
        if instance.role not in ("mixed", "prefill", "decode"):
            continue
        group = instance.server.group if instance.server is not None else None
        key = f"{group.role} group {group.number}" if group is not None else instance.name
        out.setdefault(key, []).append(instance)
    return out


def plan_rollout(spec: Spec, stages: tuple[Stage, ...], deployed: Mapping[str, DeployedState],
                 address_of: Mapping[str, str], options: RolloutOptions = RolloutOptions(),
                 answer_paths=None, spare: Optional[Mapping[str, Spare]] = None,
                 surge_container=None) -> tuple[tuple[Stage, ...], Optional[dict]]:
    """The container stages with each replaced serving unit moved into drain waves (or unchanged for recreate),
    and the rollout's summary for `plan` (None when no serving container is replaced)."""
    front = front_of(spec)
    strategy = strategy_of(spec, front)
    by_name = {i.name: i for i in spec.instances}
    replaced = _replaced_serving(stages, deployed, by_name)
    if not replaced:
        return stages, None
    summary: dict = {"strategy": strategy, "front": front.kind if front else None}
    why_not = _why_not_drain(spec, stages, front, strategy)
    if why_not:
        summary.update(strategy="recreate", gap=why_not)
        return _refreshed(spec, stages, front, replaced, address_of), summary
    all_backends = {b.name: b for b in backends(spec, address_of)}
    units = []
    for key, members in units_of(spec, address_of).items():
        changed = tuple(i.name for i in members if i.name in replaced)
        if changed:
            units.append(Unit(members[0].role, key, changed,
                              tuple(all_backends[i.name] for i in members if i.name in all_backends)))
    waves, gaps = _waves(spec, units, address_of)
    moved = {name for unit in units for name in unit.containers}
    kept = tuple(Stage(s.name, tuple(step for step in s.steps if not (s.name in WAVE_STAGES and step.container in moved)),
                       s.summary, s.counts_bytes) for s in stages if s.name in WAVE_STAGES)
    after = tuple(s for s in stages if s.name not in WAVE_STAGES)
    steps_of = {(s.name, step.container): step for s in stages if s.name in WAVE_STAGES for step in s.steps}
    planned: list[Stage] = list(kept)
    surges = _surges(spec, waves, spare or {}, address_of, by_name) if surge_container is not None else {}
    for number, wave in enumerate(waves, 1):
        surge = tuple(surges[u.label] for u in wave if u.label in surges)
        planned.extend(_wave_stages(number, len(waves), wave, front, steps_of, options, answer_paths,
                                    surge, surge_container, address_of))
    summary["waves"] = [{"wave": n, "units": [u.label for u in wave],
                         "containers": [c for u in wave for c in u.containers],
                         **({"surge": [f"{surges[u.label].name} on {surges[u.label].host} devices "
                                       f"{','.join(map(str, surges[u.label].devices))} port {surges[u.label].port}"
                                       for u in wave if u.label in surges]}
                            if any(u.label in surges for u in wave) else {})}
                        for n, wave in enumerate(waves, 1)]
    if surges:
        gaps = [g for g in gaps if not any(g.startswith(f"{surges[k].role}:") for k in surges)]
    summary["drain_timeout_s"] = options.drain_timeout
    if gaps:
        summary["gap"] = "; ".join(gaps)
    return tuple(planned) + after, summary


def _refreshed(spec: Spec, stages: tuple[Stage, ...], front: Optional[Front], replaced: set[str],
               address_of) -> tuple[Stage, ...]:
    """Recreate behind a front that keeps running and can change its list: once the new servers serve, each is
    taken out and put back, so the front forgets the failures it saw while they were down (vllm-router keeps a
    dead worker unhealthy until its next health check, 60 s by default, and answers 503 meanwhile)."""
    if front is None or not front.changes_list or _front_changes(stages, front):
        return stages
    again = tuple(b for b in backends(spec, address_of) if b.name in replaced)
    # awaited: vllm-ascend's proxy (v0.21 on) adds at its listener's next tick, and a role it lists none of
    # answers 500 (`No available ... servers`) to the answer check meanwhile
    step = Step(front.host, "route", "add", f"put the restarted servers back into the {front.kind}",
                commands=remove_commands(front, again) + add_commands(front, again),
                actions=(listed(front, again, DEFAULT_DRAIN_TIMEOUT),))
    at = max(i for i, s in enumerate(stages) if s.name in WAVE_STAGES) + 1
    return stages[:at] + (Stage("route", (step,)),) + stages[at:]


def _front_changes(stages, front: Front) -> bool:
    step = next((s for stage in stages for s in stage.steps if s.container == front.instance.name), None)
    return step is not None and step.action != "keep"


def _replaced_serving(stages, deployed, by_name) -> set[str]:
    """Workers this plan replaces while they run (a stopped one has nothing to drain)."""
    out = set()
    for stage in stages:
        if stage.name != "stop":
            continue
        for step in stage.steps:
            instance = by_name.get(step.container or "")
            current = deployed.get(step.host, DeployedState()).container(step.container or "")
            if (step.action == "replace" and instance is not None and instance.role in ("mixed", "prefill", "decode")
                    and current is not None and current.running):
                out.add(instance.name)
    return out


def _why_not_drain(spec: Spec, stages, front: Optional[Front], strategy: str) -> str:
    """Why this update cannot drain through its front ("" when it can)."""
    if front is not None and not front.changes_list:
        return f"the {front.kind} cannot take a server out while serving ({front.why_fixed}): " + _gap(spec)
    if strategy == "recreate":
        return ("strategy recreate: every replaced server stops before its replacement starts; requests in flight "
                "on them fail and new ones fail until they serve again")
    if front is None:
        return "no front: clients address the instances directly"
    step = next((s for stage in stages for s in stage.steps if s.container == front.instance.name), None)
    if step is not None and step.action != "keep":
        return f"the front itself is {'replaced' if step.action == 'replace' else 'created'} ({step.reason})"
    if spec.upstream is not None and _ranks_change(spec, stages):
        return ("a DP group changes its ranks (some start or stop for good): the ranks of one group stop and "
                "start together")
    return ""


def _ranks_change(spec: Spec, stages) -> bool:
    """Whether the plan starts or retires a rank beside replacing others (a changed dp): a wave would run the
    group's new ranks with its old ones, or stop old ones while the rest of their group serves."""
    names = {i.name for i in spec.instances}
    steps = [s for stage in stages if stage.name in ("stop", "workers") for s in stage.steps]
    retired = any(s.stage == "stop" and s.action == "remove" and s.container not in names
                  and not (s.container or "").endswith(".previous") for s in steps)
    created = any(s.stage == "workers" and s.action == "create" for s in steps)
    return retired or created


# benchmarks/rollout.py on the test bed (stand-in, 0.5 s load): the AscendCloud scheduler flow served nothing for
# 2.0 s while `up` replaced it (stop all, start all, contract, the scheduler)
BED_SCHEDULER_GAP_S = 2.0


def _gap(spec: Spec) -> str:
    """How long a recreate serves nothing, in the order it keeps it shortest: every replaced server stops at once,
    all start at once, then the front once they serve."""
    from deployctl.spec.startup import startup_budget

    return (f"nothing is served from the moment they stop until the slowest of them has loaded its model (at "
            f"most {startup_budget(spec).seconds} s, health.startup_timeout) and passed the contract check and "
            f"the front serves again; every server stops at once and all start at once, the shortest order; on "
            f"the test bed (0.5 s model load): {BED_SCHEDULER_GAP_S:g} s")


def _waves(spec: Spec, units: list[Unit], address_of) -> tuple[list[list[Unit]], list[str]]:
    """Waves of at most max_unavailable units per role, never a role's last serving unit beside another of it:
    a role with one unit goes out alone, and that leaves a gap (said)."""
    total = {}
    for key, members in units_of(spec, address_of).items():
        total[members[0].role] = total.get(members[0].role, 0) + 1
    per_role: dict[str, list[Unit]] = {}
    for unit in units:
        per_role.setdefault(unit.role, []).append(unit)
    gaps = []
    size = {}
    for role, changed in per_role.items():
        size[role] = max(1, min(spec.rollout.max_unavailable, total[role] - 1))
        if total[role] == 1:
            gaps.append(f"{role}: its one {'group' if spec.upstream else 'instance'} goes out of the front while "
                        f"it is replaced (no other {role} server answers meanwhile)")
    count = max(math.ceil(len(changed) / size[role]) for role, changed in per_role.items())
    waves = [[u for role, changed in per_role.items() for u in changed[k * size[role]:(k + 1) * size[role]]]
             for k in range(count)]
    return waves, gaps


def _surges(spec: Spec, waves, spare: Mapping[str, Spare], address_of, by_name) -> dict[str, Instance]:
    """Up to max_surge units per wave get a surge server: the same instance on free cards of its host and a free
    port, started and put into the front before the instance is drained (instances only: a vllm-ascend DP group's
    ranks, ports and KV engine ids are the group's own)."""
    if spec.rollout.max_surge < 1 or spec.upstream is not None:
        return {}
    free = {host: list(s.cards) for host, s in spare.items()}
    taken = {host: set(s.ports) | {p for i in spec.instances if i.host == host for p in _ports_of(i)}
             for host, s in spare.items()}
    out: dict[str, Instance] = {}
    for wave in waves:
        for unit in wave[:spec.rollout.max_surge]:
            if len(unit.containers) != 1:
                continue
            instance = by_name[unit.containers[0]]
            cards = free.get(instance.host, [])
            if len(cards) < len(instance.devices) or instance.port is None:
                continue
            port = next(p for p in range(instance.port + SURGE_PORT_OFFSET, 65536) if p not in taken[instance.host])
            taken[instance.host].add(port)
            devices, free[instance.host] = tuple(cards[:len(instance.devices)]), cards[len(instance.devices):]
            out[unit.label] = replace(instance, devices=devices, port=port, name=instance.name + SURGE_SUFFIX)
    return out


def _ports_of(instance: Instance) -> tuple[int, ...]:
    return tuple(p for p in (instance.port, instance.grpc_port, instance.metrics_port) if p is not None)


def _surge_stages(number: int, tag: str, surge: tuple[Instance, ...], front: Front, surge_container,
                  address_of: Mapping[str, str], options: RolloutOptions) -> tuple[list[Stage], list[Stage]]:
    """Before the wave: each surge server started on its free cards and put into the front. After it: taken out,
    drained and removed (the spec's instance serves on its own devices again)."""
    from deployctl.core import Command
    from deployctl.plan.model import HealthCheck

    started, route_in, route_out, stopped = [], [], [], []
    for instance in surge:
        run, health = surge_container(instance)
        backend = Backend(instance.role, instance.name, address_of[instance.host], instance.port)
        started.append(Step(instance.host, "surge", "create", f"{tag}: {instance.name} on free devices "
                                                               f"{','.join(map(str, instance.devices))} first",
                            container=instance.name, wave=number,
                            commands=(Command(("docker", "rm", "--force", instance.name), check=False), run),
                            undo=(Command(("docker", "rm", "--force", instance.name), check=False),),
                            health=health))
        route_in.append(Step(front.host, "route", "add", f"{tag}: put {instance.name} into the {front.kind}",
                             commands=add_commands(front, (backend,)), undo=remove_commands(front, (backend,)),
                             actions=(listed(front, (backend,), options.drain_timeout),), wave=number))
        route_out.append(Step(front.host, "drain", "drain", f"{tag}: take {instance.name} out, wait for its "
                                                            f"requests", commands=remove_commands(front, (backend,)),
                              actions=(Drain(((instance.name, f"{backend.url}/metrics"),), options.drain_timeout),),
                              wave=number))
        stopped.append(Step(instance.host, "stop", "remove", f"{tag}: {instance.name} served its turn",
                            container=instance.name, wave=number,
                            commands=(Command(("docker", "stop", "--time", str(options.shutdown_timeout),
                                               instance.name)),
                                      Command(("docker", "rm", "--force", instance.name), check=False))))
    before = [Stage("surge", tuple(started), wave=number), Stage("route", tuple(route_in), wave=number)]
    after = [Stage("drain", tuple(route_out), wave=number), Stage("stop", tuple(stopped), wave=number, commit=True)]
    return before, after


def _wave_stages(number: int, total: int, wave: list[Unit], front: Front, steps_of, options: RolloutOptions,
                 answer_paths, surge: tuple[Instance, ...] = (), surge_container=None,
                 address_of: Mapping[str, str] = {}) -> list[Stage]:
    out_of_front = tuple(b for u in wave for b in u.backends)
    names = ", ".join(u.label for u in wave)
    tag = f"wave {number}/{total}"
    before, after = (_surge_stages(number, tag, surge, front, surge_container, address_of, options) if surge
                     else ([], []))
    drain = Step(front.host, "drain", "drain", f"{tag}: take {names} out of the {front.kind}, wait for their requests",
                 commands=remove_commands(front, out_of_front),
                 actions=(Drain(tuple((b.name, f"{b.url}/metrics") for b in out_of_front), options.drain_timeout),),
                 late_undo=add_commands(front, out_of_front), wave=number)
    stages = [Stage("drain", (drain,), wave=number)]
    for stage in WAVE_STAGES:
        steps = tuple(replace(steps_of[(stage, c)], wave=number) for u in wave for c in u.containers
                      if (stage, c) in steps_of)
        if steps:
            stages.append(Stage(stage, steps, wave=number))
    if answer_paths is not None and options.answer_tokens:
        paths = _wave_paths(answer_paths, {c for u in wave for c in u.containers}, front.instance.name)
        if paths:
            check = AnswerCheck(paths, options.answer_tokens, options.answer_timeout)
            stages.append(Stage("answers", (Step(front.host, "answers", "run", f"{tag}: the replaced servers answer "
                                                 f"as the others do", actions=(check,), wave=number),), wave=number))
    route = Step(front.host, "route", "add", f"{tag}: put {names} back into the {front.kind}",
                 commands=add_commands(front, out_of_front), wave=number,
                 actions=(listed(front, out_of_front, options.drain_timeout),))
    stages.append(Stage("route", (route,), wave=number, commit=not after))
    return before + stages + after


def listed(front: Front, back: tuple[Backend, ...], timeout: float) -> AwaitListed:
    """Wait until the front lists what was put back (a proxy may take it only at its next tick)."""
    return AwaitListed(front.kind, list_command(front), tuple(b.key for b in back), timeout)


def _wave_paths(paths, replaced: set[str], front_name: str) -> tuple:
    """The serving paths through the wave's servers, and one through servers it left alone to compare with."""
    def touches(path) -> bool:
        return any(part.strip() in replaced for part in path.name.split("->"))

    mine = tuple(p for p in paths if touches(p) and p.name != front_name)
    others = [p for p in paths if not touches(p) and p.name != front_name]
    return mine + tuple(others[:1]) if mine else ()



DRAIN_SCRIPT = ('for u; do printf "== %s\\n" "$u"; curl --silent --max-time 2 --fail "$u" || printf "!! no answer\\n"; '
                'done')
MARK = "== "


def in_flight(text: str, servers: tuple[tuple[str, str], ...]) -> dict[str, Optional[float]]:
    """The answers to DRAIN_SCRIPT: requests each server runs or queues (None: its /metrics did not answer or has
    neither of vLLM's gauges)."""
    from deployctl.bench.telemetry import parse_engine

    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(MARK):
            current = sections.setdefault(line[len(MARK):].strip(), [])
        elif current is not None:
            current.append(line)
    out: dict[str, Optional[float]] = {}
    for name, url in servers:
        lines = sections.get(url)
        engine = parse_engine(name, "\n".join(lines)) if lines and lines != ["!! no answer"] else None
        if engine is None or (engine.running is None and engine.waiting is None):
            out[name] = None
        else:
            out[name] = (engine.running or 0.0) + (engine.waiting or 0.0)
    return out


def drain_left(counts: Mapping[str, Optional[float]]) -> str:
    """What a drain leaves at its deadline, by server ("" when nothing)."""
    parts = [f"{name}: {int(n)} request(s)" for name, n in counts.items() if n]
    parts += [f"{name}: its /metrics did not answer" for name, n in counts.items() if n is None]
    return "; ".join(parts)


def front_steps(spec: Spec, names: tuple[str, ...], address_of: Mapping[str, str],
                drain_timeout: float = DEFAULT_DRAIN_TIMEOUT) -> Optional[tuple[Step, Step]]:
    """The seam for anything that restarts servers outside `up` (`deployctl watch`): (take out and drain, put back
    and wait until listed) for the units holding the containers `names` (a DP group goes whole), on the front's
    host; None when the spec has no front that can change its list."""
    front = front_of(spec)
    if front is None or not front.changes_list:
        return None
    wanted = set(names)
    members = [i.name for unit in units_of(spec, address_of).values() if wanted & {i.name for i in unit}
               for i in unit]
    chosen = tuple(b for b in backends(spec, address_of) if b.name in members)
    label = ", ".join(b.name for b in chosen)
    out = Step(front.host, "drain", "drain", f"take {label} out of the {front.kind}, wait for their requests",
               commands=remove_commands(front, chosen),
               actions=(Drain(tuple((b.name, f"{b.url}/metrics") for b in chosen), drain_timeout),),
               late_undo=add_commands(front, chosen))
    back = Step(front.host, "route", "add", f"put {label} back into the {front.kind}",
                commands=add_commands(front, chosen), actions=(listed(front, chosen, drain_timeout),))
    return out, back
