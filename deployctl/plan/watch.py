"""`deployctl watch`, the pure half: what one probe saw of each server (observations), whether each server makes
progress (a verdict, judged against the probe before), which units restart (a vllm-ascend DP group as a whole,
anything else alone) and the plan that restarts one (the executor's stop and start steps, plus the front's).

Liveness is progress, not `/health`: a server is stalled when its engines generated no token between two probes
while requests ran or waited, when a one-token generate did not finish and no token was generated meanwhile, or
when a known error signature appears in its new log lines. A long queue whose tokens still advance is busy, not
stalled: the one-token generate waits in that queue too, so it alone never restarts a server that generates."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence

from deployctl.bench.telemetry import Engine
from deployctl.core import Command
from deployctl.facts.liveness import Answer
from deployctl.plan.model import HealthCheck, Plan, Stage, Step
from deployctl.plan.units import unit_of  # the rollout's units: a DP group whole, else an instance alone
from deployctl.servers.shutdown import stop_command  # the one stop policy, as `up` stops what it replaces
from deployctl.spec.model import Instance, Spec

# verdicts that restart a unit; the others are said and left alone
RESTART = ("stalled", "engine-dead", "down", "unresponsive")
NO_ACTION = ("healthy", "idle", "busy", "starting", "suspect", "missing", "unhealthy", "unreachable")


# the counters an observation keeps of each engine (bench/telemetry.py's Engine), in the state file and the history
ENGINE_FIELDS = ("generation_tokens", "prompt_tokens", "running", "waiting")


def queued(engine: Engine) -> float:
    """Requests an engine holds, running or waiting."""
    return (engine.running or 0.0) + (engine.waiting or 0.0)


@dataclass(frozen=True)
class Observation:
    """One server (container) at one probe."""

    instance: str  # the container's name
    host: str
    time: float  # seconds (the control machine's clock)
    state: str  # the container's: running | exited | created | ... | missing | unreachable (its host)
    container_id: Optional[str] = None
    exit_code: int = 0
    health_code: Optional[int] = None  # its health path's HTTP status (0: no answer); None: not asked (headless)
    liveness: Optional[Answer] = None  # the one-token generate; None: not asked
    engines: Mapping[str, Engine] = field(default_factory=dict)  # engine index -> its counters at this probe
    signatures: tuple[tuple[str, str], ...] = ()  # (signature id, the line, redacted) found in its new log lines
    detail: str = ""  # why it was not seen (an `unreachable` one), redacted; never kept in the state file
    started: Optional[float] = None  # when its container last started (docker's State.StartedAt, epoch seconds)

    def to_json(self) -> dict:
        """What the next `watch --once` compares against (the state file) and what --output json says."""
        return {"instance": self.instance, "host": self.host, "time": round(self.time, 3), "state": self.state,
                "container_id": self.container_id, "exit_code": self.exit_code, "health_code": self.health_code,
                "liveness": None if self.liveness is None else [self.liveness.status, self.liveness.size],
                "engines": {k: {f: getattr(v, f) for f in ENGINE_FIELDS} for k, v in self.engines.items()},
                **({"started": round(self.started, 3)} if self.started is not None else {})}

    @classmethod
    def from_json(cls, doc: dict) -> "Observation":
        """An observation the state file kept; ValueError naming the field where it is damaged (the file is the
        control machine's, but anything may have written it)."""
        if not isinstance(doc, dict):
            raise ValueError("an observation is not a JSON object")
        live = doc.get("liveness")
        if live is not None and not (isinstance(live, list) and len(live) == 2 and all(_is_int(x) for x in live)):
            raise ValueError(f"liveness {live!r} is not [HTTP status, bytes]")
        engines = doc.get("engines") or {}
        if not isinstance(engines, dict) or not all(isinstance(v, dict) for v in engines.values()):
            raise ValueError("engines is not an object of objects")
        return cls(_text(doc, "instance"), _text(doc, "host"), finite_number(doc.get("time"), "time"),
                   _text(doc, "state"), _text(doc, "container_id", optional=True),
                   exit_code=_integer(doc.get("exit_code", 0), "exit_code"),
                   health_code=None if doc.get("health_code") is None else _integer(doc["health_code"], "health_code"),
                   liveness=Answer(*live) if live else None,
                   engines={str(k): Engine(str(k), **{f: None if v.get(f) is None else finite_number(v[f], f"engines.{k}.{f}")
                                                      for f in ENGINE_FIELDS})
                            for k, v in engines.items()},
                   started=None if doc.get("started") is None else finite_number(doc["started"], "started"))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(doc: dict, key: str, optional: bool = False) -> Optional[str]:
    value = doc.get(key)
    if (value is None and optional) or isinstance(value, str):
        return value
    raise ValueError(f"{key} {value!r} is not a string")


def _integer(value, key: str) -> int:
    if not _is_int(value):
        raise ValueError(f"{key} {value!r} is not an integer")
    return value


def finite_number(value, key: str) -> float:
    """A finite number (JSON's NaN and Infinity, which Python reads, are none; neither is a string or a bool)."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{key} {value!r} is not a finite number")
    return float(value)


@dataclass(frozen=True)
class Verdict:
    instance: str
    host: str
    state: str  # one of RESTART or NO_ACTION
    reason: str

    @property
    def restarts(self) -> bool:
        return self.state in RESTART


def judge(previous: Optional[Observation], current: Observation, *, front: bool = False,
          starting: bool = False, hang_timeout: float = 15.0) -> Verdict:
    """One server's verdict from this probe and the one before (None: none yet, or another container since).
    `front`: the scheduler or proxy (restarted only when its container stopped: an unhealthy front usually
    means its backends are); `starting`: it started lately (`up` or watch started it) and may still be loading its
    model: `starting_up` says."""
    def verdict(state: str, reason: str) -> Verdict:
        return Verdict(current.instance, current.host, state, reason)

    if previous is not None and previous.container_id != current.container_id:
        previous = None  # another container (an `up` replaced it): nothing to compare with
    if current.state == "unreachable":
        return verdict("unreachable", current.detail or "its host did not answer this probe")
    if current.state == "missing":
        return verdict("missing", "no container: `deployctl up` creates it")
    if current.state != "running":
        return verdict("down", f"container {current.state} (exit code {current.exit_code})")
    if current.health_code is None:  # a headless vllm-ascend server: its group's API server speaks for it
        return verdict("healthy", "running (headless: its group's API server answers for it)")
    if front:
        if current.health_code == 200:
            return verdict("healthy", "health 200")
        return verdict("unhealthy", f"health {_code(current.health_code)} (a front reports its backends; "
                                    "restarting it would not help)")
    logged = (f"known error in its new log lines: {current.signatures[0][0]}: {current.signatures[0][1]}"
              if current.signatures else "")
    if current.health_code == 503:  # vLLM's /health: EngineDeadError (vllm/entrypoints/serve/instrumentator/health.py)
        return verdict("engine-dead", "health 503: the engine core died (vLLM's EngineDeadError)"
                       + (f"; {logged}" if logged else ""))
    if logged:
        return verdict("stalled", logged)
    if current.health_code != 200:
        if starting:
            return verdict("starting", f"health {_code(current.health_code)}, started lately: loading")
        if previous is not None and previous.health_code not in (None, 200):
            return verdict("unresponsive", f"health {_code(current.health_code)} at two probes in a row")
        return verdict("suspect", f"health {_code(current.health_code)}; confirmed or not at the next probe")
    span = current.time - previous.time if previous is not None else 0.0
    stalled = _stalled_engines(previous, current)
    if stalled:
        return verdict("stalled", "; ".join(f"engine {e}: no token generated in {span:.1f} s while "
                                            f"{_count(c.running)} running, {_count(c.waiting)} waiting"
                                            for e, c in stalled))
    advanced = _advanced(previous, current)
    if current.liveness is not None and refused(current.liveness):
        # An answer, not a hang: its API server read the request and said no, as a server answers what its role
        # does not take (a P/D decode whose connector wants the prefill's kv_transfer_params). Its engines are
        # then judged by their counters alone, as a headless rank's are by its group's.
        current = replace(current, liveness=None)
    if current.liveness is not None and not current.liveness.generated:
        what = (f"a one-token generate did not finish within {hang_timeout:g} s" if current.liveness.status == 0
                else f"a one-token generate answered {current.liveness.status} with {current.liveness.size} bytes")
        if advanced:  # a long queue: the probe waited behind requests that do get tokens
            return verdict("busy", f"{what}, but {advanced:g} token(s) generated in {span:.1f} s (a long queue)")
        if previous is None:
            return verdict("suspect", f"{what}; no earlier probe to compare progress with")
        queued_before = sum(queued(c) for c in previous.engines.values())
        if (previous.liveness is None or previous.liveness.generated) and not queued_before:
            # an idle server at the probe before: a burst that arrived since may not have had its first tokens yet
            # (a long prefill), so it takes a second probe (a stall is still seen within two periods)
            return verdict("suspect", f"{what} and no token was generated in {span:.1f} s; confirmed or not at "
                                      "the next probe")
        return verdict("stalled", f"{what} and no token was generated in {span:.1f} s")
    if not current.engines:
        return verdict("healthy", "health 200" + ("" if current.liveness is None else ", a one-token generate answers"))
    held = sum(queued(c) for c in current.engines.values())
    if not held:
        return verdict("idle", "no request held")
    if advanced:
        return verdict("busy", f"{advanced:g} token(s) generated in {span:.1f} s, {held:g} request(s) held")
    return verdict("busy", f"{held:g} request(s) held; its progress is judged at the next probe")


def starting_up(current: Observation, restarted: Optional[float], grace: float) -> bool:
    """Whether a server may still be loading its model: its container started (docker's StartedAt, the host's
    clock) or watch restarted it less than `grace` (the health budget `up` gives a start) ago. Without it a server
    `up` has just started would be restarted, being still unhealthy at two probes, before it could ever serve."""
    since = max((t for t in (current.started, restarted) if t is not None), default=None)
    return since is not None and current.time - since < grace


def refused(answer: Answer) -> bool:
    """A one-token generate the server answered with a 4xx: it is up and reads requests (a hang answers nothing
    within the bound, a dead engine 5xx)."""
    return 400 <= answer.status < 500


def _stalled_engines(previous: Optional[Observation], current: Observation) -> list[tuple[str, Engine]]:
    """Engines whose counters did not move between the two probes while they held requests at both."""
    if previous is None:
        return []
    out = []
    for index, now in current.engines.items():
        before = previous.engines.get(index)
        if before is None or now.generation_tokens is None or before.generation_tokens is None:
            continue
        if now.generation_tokens < before.generation_tokens:
            continue  # the counter restarted: the engine did
        flat = now.generation_tokens == before.generation_tokens and (
            now.prompt_tokens is None or before.prompt_tokens is None or now.prompt_tokens == before.prompt_tokens)
        if flat and queued(before) > 0 and queued(now) > 0:
            out.append((index, now))
    return out


def _advanced(previous: Optional[Observation], current: Observation) -> float:
    """Tokens generated between the two probes, over every engine, less the one token of the previous probe's own
    one-token generate (it read /metrics before asking it): that one proves nothing about the requests held."""
    if previous is None:
        return 0.0
    total = 0.0
    for index, now in current.engines.items():
        before = previous.engines.get(index)
        if before and now.generation_tokens is not None and before.generation_tokens is not None:
            total += max(0.0, now.generation_tokens - before.generation_tokens)
    own = 1.0 if previous.liveness is not None and previous.liveness.generated else 0.0
    return max(0.0, total - own)


def _code(code: int) -> str:
    return "no answer" if code == 0 else str(code)


def _count(value: Optional[float]) -> str:
    return "?" if value is None else f"{value:g}"


# --- what restarts ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Restart:
    """One unit to restart: a whole DP group (its ranks fail together: one rank's collective hangs every other's),
    or one instance; with the verdicts that asked for it."""

    unit: str  # `decode0` (a group) or the instance's container name
    instances: tuple[Instance, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def reason(self) -> str:
        return "; ".join(f"{v.instance}: {v.state}: {v.reason}" for v in self.verdicts)

    def to_json(self) -> dict:
        return {"unit": self.unit, "containers": [i.name for i in self.instances],
                "hosts": sorted({i.host for i in self.instances}), "reason": self.reason}


def restarts(spec: Spec, verdicts: Sequence[Verdict]) -> tuple[Restart, ...]:
    """The units to restart, in spec order, each once however many of its servers stalled."""
    by_name = {i.name: i for i in spec.instances}
    units: dict[str, tuple[tuple[Instance, ...], list[Verdict]]] = {}
    for verdict in verdicts:
        instance = by_name.get(verdict.instance)
        if instance is None or not verdict.restarts:
            continue
        unit, members = unit_of(spec, instance)
        units.setdefault(unit, (members, []))[1].append(verdict)
    return tuple(Restart(unit, members, tuple(found)) for unit, (members, found) in units.items())


# --- how a unit restarts ----------------------------------------------------------------------------------------

ROUTE_TIMEOUT_S = 60.0  # how long a restarted front may take to list the spec's servers
# A constant script: is NAME ($1) still the container ID ($2) the probe saw? An `up` may have replaced it since.
SAME_CONTAINER = '[ "$(docker inspect --format "{{.Id}}" "$1" 2>/dev/null)" = "$2" ]'


def front_stages(spec: Spec, restart: Restart, address_of: Mapping[str, str]) -> tuple[Stage, Stage]:
    """Take the unit out of the front (no wait for its requests: they cannot finish), then put it back once it
    serves (the rollout's own steps, plan/rollout.py front_steps); empty stages where the front cannot change its
    list or the front's addresses are not known."""
    from deployctl.plan.front import backends
    from deployctl.plan.rollout import front_steps

    listed = backends(spec, address_of) if address_of else ()
    mine = {i.name for i in restart.instances}
    if not any(b.name in mine for b in listed):
        return Stage("drain", ()), Stage("undrain", ())  # none of its servers is the front's (the front itself)
    if sole_of_a_role(spec, restart, listed):
        # Taken out, it would leave the front with no server of its role: every request would fail at the front,
        # and a put-back that goes wrong would leave the list without it. It restarts listed: the front's own
        # retries meet it again once it serves.
        return Stage("drain", ()), Stage("undrain", ())
    # No wait for its requests: watch restarts a unit only when it cannot finish them (stalled, engine dead, down,
    # unresponsive), so a drain would only wait out --drain-timeout (120 s) before the same stop cuts them.
    found = front_steps(spec, tuple(i.name for i in restart.instances), address_of, wait_requests=False) \
        if address_of else None
    out, back = found if found is not None else ((), ())
    return Stage("drain", (out,) if out else ()), Stage("undrain", (back,) if back else ())


def front_list_stage(spec: Spec, restart: Restart, address_of: Mapping[str, str]) -> Stage:
    """A restarted front that changes its list at run time starts from its argv, which holds the lists of the `up`
    that created it (its list is no part of its identity): bring its list to the spec's once it serves."""
    from deployctl.plan.actions import SyncList
    from deployctl.plan.front import backends, front_of, list_command

    front = front_of(spec)
    if front is None or not front.changes_list or not address_of or front.instance not in restart.instances:
        return Stage("route", ())
    wanted = backends(spec, address_of)
    return Stage("route", (Step(front.host, "route", "restart", f"the restarted {front.kind} routes to the spec's "
                                                                "servers, not its argv's",
                                actions=(SyncList(front.kind, front.port, list_command(front), wanted,
                                                  ROUTE_TIMEOUT_S),)),))


def sole_of_a_role(spec: Spec, restart: Restart, listed) -> bool:
    """Whether the unit holds every backend the front has of one of its roles (`listed`: plan/front.py backends)."""
    mine = {i.name for i in restart.instances}
    roles = {b.role for b in listed if b.name in mine}
    return any(all(b.name in mine for b in listed if b.role == role) for role in roles)


def restart_plan(spec: Spec, restart: Restart, observed: Mapping[str, Optional[str]],
                 address_of: Mapping[str, str] = {},  # noqa: B006 - read only
                 shutdown_timeout: Optional[int] = None) -> Plan:
    """drain (the front's) -> stop every container of the unit (each checked to be the one observed) -> start them
    again, at once (a DP group serves only once every rank is back), each waited for until healthy -> back into
    the front. The same containers: their digest labels, and any `.previous` beside them, stay as `up` left
    them. `observed`: container name -> the ID the probe saw (None: it was missing and is not touched);
    `address_of`: how the front names each host's servers (none: the front is left as it is); each stop waits the
    server's own --shutdown-timeout, at least `shutdown_timeout` (None: docker's default)."""
    from deployctl.plan.probes import health_path

    stops, starts = [], []
    for instance in restart.instances:
        seen = observed.get(instance.name)
        if not seen:
            continue
        why = restart.reason
        stops.append(Step(instance.host, "stop", "restart", why, container=instance.name, commands=(
            Command(("sh", "-c", SAME_CONTAINER, "sh", instance.name, seen),
                    failure=f"{instance.name} is no longer the container watch observed (an `up` replaced it?)"),
            stop_command(instance.name, instance.extra_args, shutdown_timeout),
        )))
        health = (HealthCheck(instance.name, instance.port, health_path(spec, instance))
                  if instance.port is not None else None)
        starts.append(Step(instance.host, "workers", "restart", why, container=instance.name,
                           commands=(Command(("docker", "start", instance.name)),), health=health))
    drain, undrain = front_stages(spec, restart, address_of)
    stages = [drain, Stage("stop", tuple(stops)), Stage("workers", tuple(starts)), undrain,
              front_list_stage(spec, restart, address_of)]
    return Plan(spec.name, tuple(s for s in stages if s.steps))


def missing_members(restart: Restart, observed: Mapping[str, Optional[str]]) -> tuple[str, ...]:
    """The unit's containers the probe did not see (missing, or on a host that did not answer): restarting the rest
    of a DP group would wait for a rank that never comes."""
    return tuple(i.name for i in restart.instances if not observed.get(i.name))


def history_record(restart: Restart, result: str, dry_run: bool = False) -> dict:
    """The deployment's history line for one restart (deployctl/lock.py appends it as the lock is released)."""
    return {"action": "watch restart", "unit": restart.unit, "containers": [i.name for i in restart.instances],
            "reason": restart.reason, "result": result, **({"dry_run": True} if dry_run else {})}
