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
from deployctl.facts.listening import Listening
from deployctl.plan.actions import AnswerCheck
from deployctl.plan.front import (Backend, Front, add_commands, await_listed, backends, drain_step, front_of,
                                  remove_commands, route_step)
from deployctl.plan.model import Stage, Step
from deployctl.plan.units import serving_units, unit_of
from deployctl.spec.model import Instance, Spec
from deployctl.servers import flavour_of
from deployctl.servers.shutdown import DEFAULT_SHUTDOWN_TIMEOUT, stop_command

DEFAULT_DRAIN_TIMEOUT = 120.0  # seconds a drained instance may take to finish its requests (--drain-timeout)
WAVE_STAGES = ("stop", "workers", "contract")  # a replaced unit's steps in these move into its wave


# A wave's answer check asks for one token: the contract check already ran, and the first token shows that the
# replaced servers generate and agree with the others; the full all-pairs check (--answer-tokens) runs once, after
# the last wave. At a real server's tens of ms a token this is little; at the stand-in's 100 ms it was 0.8 s a wave.
WAVE_ANSWER_TOKENS = 1


@dataclass(frozen=True)
class RolloutOptions:
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    answer_tokens: int = WAVE_ANSWER_TOKENS  # each wave's answer check; 0: none
    answer_timeout: float = 120.0
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT


@dataclass(frozen=True)
class Spare:
    """What a host has free for surge: cards no container holds and the spec does not use, ports in use."""

    cards: tuple[int, ...] = ()
    ports: frozenset[int] = frozenset()
    listening: Optional[Listening] = None  # its ephemeral range and reserved ports (a surge server's are reserved)


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
    for key, members in serving_units(spec).items():
        changed = tuple(i.name for i in members if i.name in replaced)
        if changed:
            units.append(Unit(members[0].role, key, changed,
                              tuple(all_backends[i.name] for i in members if i.name in all_backends)))
    waves, gaps = _waves(spec, units)
    moved = {name for unit in units for name in unit.containers}
    kept = tuple(Stage(s.name, tuple(step for step in s.steps if not (s.name in WAVE_STAGES and step.container in moved)),
                       s.summary, s.counts_bytes) for s in stages if s.name in WAVE_STAGES)
    after = tuple(s for s in stages if s.name not in WAVE_STAGES)
    steps_of = {(s.name, step.container): step for s in stages if s.name in WAVE_STAGES for step in s.steps}
    planned: list[Stage] = list(kept)
    surges = _surges(spec, waves, spare or {}, address_of, by_name) if surge_container is not None else {}
    for number, wave in enumerate(waves, 1):
        surge = tuple(i for u in wave if u.label in surges for i in surges[u.label])
        planned.extend(_wave_stages(number, len(waves), wave, front, steps_of, options, answer_paths,
                                    surge, surge_container, address_of, spare or {}))
    summary["waves"] = [{"wave": n, "units": [u.label for u in wave],
                         "containers": [c for u in wave for c in u.containers],
                         **({"surge": [f"{i.name} on {i.host} devices {','.join(map(str, i.devices))}"
                                       + (f" port {i.port}" if i.port is not None else " (headless)")
                                       for u in wave if u.label in surges for i in surges[u.label]]}
                            if any(u.label in surges for u in wave) else {})}
                        for n, wave in enumerate(waves, 1)]
    if surges:
        gaps = [g for g in gaps if not any(g.startswith(f"{surges[k][0].role}:") for k in surges)]
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
                actions=(await_listed(front, again, DEFAULT_DRAIN_TIMEOUT),))
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
    refusal = flavour_of(spec).members_change_refusal(spec)
    return refusal if refusal and _members_change(spec, stages) else ""


def _members_change(spec: Spec, stages) -> bool:
    """Whether the plan starts or retires a container beside replacing others (a vllm-ascend group's changed dp):
    a wave would run a unit's new members with its old ones, or stop old ones while the rest of their unit serves."""
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


def _waves(spec: Spec, units: list[Unit]) -> tuple[list[list[Unit]], list[str]]:
    """Waves of at most max_unavailable units per role, never a role's last serving unit beside another of it:
    a role with one unit goes out alone, and that leaves a gap (said)."""
    total = {}
    for key, members in serving_units(spec).items():
        total[members[0].role] = total.get(members[0].role, 0) + 1
    per_role: dict[str, list[Unit]] = {}
    for unit in units:
        per_role.setdefault(unit.role, []).append(unit)
    gaps = []
    size = {}
    for role, changed in per_role.items():
        size[role] = max(1, min(spec.rollout.max_unavailable, total[role] - 1))
        if total[role] == 1:
            gaps.append(f"{role}: its one {flavour_of(spec).unit_noun(spec)} goes out of the front while "
                        f"it is replaced (no other {role} server answers meanwhile)")
    count = max(math.ceil(len(changed) / size[role]) for role, changed in per_role.items())
    waves = [[u for role, changed in per_role.items() for u in changed[k * size[role]:(k + 1) * size[role]]]
             for k in range(count)]
    return waves, gaps


def _surges(spec: Spec, waves, spare: Mapping[str, Spare], address_of, by_name) -> dict[str, tuple[Instance, ...]]:
    """Up to max_surge units per wave get surge servers, started and put into the front before the unit is
    drained, as the flavour lays them out (servers/surge.py: an instance again on free cards of its host and a
    free port; a vllm-ascend DP group as a new group)."""
    flavour = flavour_of(spec)
    if flavour.surge(spec) < 1:
        return {}  # a flavour without surge is refused by validate, with its reason (servers/features.py)
    from deployctl.spec.port_set import spec_ports

    used = {host: set(s.ports) for host, s in spare.items()}
    for use in spec_ports(spec):  # every port of the spec's one set, its hosts' exporters too
        used.setdefault(use.host, set()).add(use.port)
    units = serving_units(spec)
    out: dict[str, tuple[Instance, ...]] = {}
    for wave in waves:
        # a wave's surge servers are gone when it ends: the next wave has the same cards and ports again
        free = {host: list(s.cards) for host, s in spare.items()}
        taken = {host: set(ports) for host, ports in used.items()}
        for unit in wave[:spec.rollout.max_surge]:
            found = flavour.surge_unit(spec, units[unit.label], len(out), free, taken)
            if found:
                out[unit.label] = found
    return out


SURGE_PORT_WHAT = {"kv_port": "kv ports", "rpc_port": "rpc port"}  # how a reservation names a surge's ports


def _surge_ports(surge: tuple[Instance, ...]) -> dict[str, list[tuple[int, str]]]:
    """host -> (port, what) for every port the surge servers listen on there: API, and a DP group's kv and rpc."""
    out: dict[str, list[tuple[int, str]]] = {}
    for instance in surge:
        out.setdefault(instance.host, []).extend(
            (p, f"{instance.name} {SURGE_PORT_WHAT.get(key, 'port')}") for key, p in instance.ports)
    return out


def _surge_stages(number: int, tag: str, surge: tuple[Instance, ...], front: Front, surge_container,
                  address_of: Mapping[str, str], options: RolloutOptions,
                  spare: Mapping[str, Spare]) -> tuple[list[Stage], list[Stage]]:
    """Before the wave: the surge servers' ports reserved where the ephemeral range holds them
    (plan/reserve_ports.py), each surge server started on its free cards and put into the front. After it: taken
    out, drained and removed (the spec's instance serves on its own devices again)."""
    from deployctl.core import Command
    from deployctl.plan.reserve_ports import reserve_step

    started, stopped = [], []
    for instance in surge:
        run, health = surge_container(instance)
        started.append(Step(instance.host, "surge", "create", f"{tag}: {instance.name} on free devices "
                                                               f"{','.join(map(str, instance.devices))} first",
                            container=instance.name, wave=number,
                            commands=(Command(("docker", "rm", "--force", instance.name), check=False), run),
                            undo=(Command(("docker", "rm", "--force", instance.name), check=False),),
                            health=health))
        stopped.append(Step(instance.host, "stop", "remove", f"{tag}: {instance.name} served its turn",
                            container=instance.name, wave=number,
                            commands=(stop_command(instance.name, run.argv, options.shutdown_timeout),
                                      Command(("docker", "rm", "--force", instance.name), check=False))))
    # the API servers (a DP group's headless ranks serve none); all at once, as a wave's own
    served = tuple(Backend(i.role, i.name, address_of[i.host], i.port) for i in surge if i.port is not None)
    names = ", ".join(b.name for b in served)
    route_in = route_step(front, served, f"{tag}: put {names} into the {front.kind}", options.drain_timeout, number,
                          undo=True)
    # taken out for good: a rollback removes the surge servers, so nothing puts them back
    route_out = drain_step(front, served, f"{tag}: take {names} out, wait for their requests",
                           options.drain_timeout, number, put_back=False)
    reserve = tuple(step for step in (reserve_step(host, ports, spare[host].listening if host in spare else None,
                                                   number) for host, ports in _surge_ports(surge).items()) if step)
    before = [Stage("ports", reserve, wave=number)] if reserve else []
    before += [Stage("surge", tuple(started), wave=number), Stage("route", (route_in,), wave=number)]
    after = [Stage("drain", (route_out,), wave=number), Stage("stop", tuple(stopped), wave=number, commit=True)]
    return before, after


def _wave_stages(number: int, total: int, wave: list[Unit], front: Front, steps_of, options: RolloutOptions,
                 answer_paths, surge: tuple[Instance, ...] = (), surge_container=None,
                 address_of: Mapping[str, str] = {}, spare: Mapping[str, Spare] = {}) -> list[Stage]:
    out_of_front = tuple(b for u in wave for b in u.backends)
    names = ", ".join(u.label for u in wave)
    tag = f"wave {number}/{total}"
    before, after = (_surge_stages(number, tag, surge, front, surge_container, address_of, options, spare)
                     if surge else ([], []))
    drain = drain_step(front, out_of_front, f"{tag}: take {names} out of the {front.kind}, wait for their requests",
                       options.drain_timeout, number)
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
            step = Step(front.host, "answers", "run", f"{tag}: the replaced servers answer as the others do",
                        actions=(check,), wave=number)
            # beside the contract check, not after it: both only read the new servers, and both must pass
            # before they go back into the front
            if stages[-1].name == "contract":
                stages[-1] = replace(stages[-1], steps=stages[-1].steps + (step,))
            else:
                stages.append(Stage("answers", (step,), wave=number))
    route = route_step(front, out_of_front, f"{tag}: put {names} back into the {front.kind}", options.drain_timeout,
                       number)
    stages.append(Stage("route", (route,), wave=number, commit=not after))
    return before + stages + after


def _wave_paths(paths, replaced: set[str], front_name: str) -> tuple:
    """The serving paths through the wave's servers, and one through servers it left alone to compare with."""
    def touches(path) -> bool:
        return any(part.strip() in replaced for part in path.name.split("->"))

    mine = tuple(p for p in paths if touches(p) and p.name != front_name)
    others = [p for p in paths if not touches(p) and p.name != front_name]
    return mine + tuple(others[:1]) if mine else ()


def front_steps(spec: Spec, names: tuple[str, ...], address_of: Mapping[str, str],
                drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
                wait_requests: bool = True) -> Optional[tuple[Step, Step]]:
    """The seam for anything that restarts servers outside `up` (`deployctl watch`): (take out and drain, put back
    and wait until listed, each at most `drain_timeout`) for the units holding the containers `names` (a DP group
    goes whole), on the front's host; None when the spec has no front that can change its list. Without
    `wait_requests` the drain takes them out and waits for nothing (servers that cannot finish their requests)."""
    front = front_of(spec)
    if front is None or not front.changes_list:
        return None
    members = {i.name for name in names for i in _members(spec, name)}
    chosen = tuple(b for b in backends(spec, address_of) if b.name in members)
    label = ", ".join(b.name for b in chosen)
    if not wait_requests:
        out = drain_step(front, chosen, f"take {label} out of the {front.kind} (their requests cannot finish)", 0.0)
    else:
        out = drain_step(front, chosen, f"take {label} out of the {front.kind}, wait for their requests", drain_timeout)
    return out, route_step(front, chosen, f"put {label} back into the {front.kind}", drain_timeout)


def _members(spec: Spec, name: str) -> tuple[Instance, ...]:
    """The unit of the container `name` (none when the spec has no such instance)."""
    instance = next((i for i in spec.instances if i.name == name), None)
    return unit_of(spec, instance)[1] if instance is not None else ()
