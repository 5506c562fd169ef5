"""`deployctl watch SPEC`: probe every server each --interval seconds (one round trip per host), judge its progress
against the probe before (plan/watch.py) and restart what stalled: a vllm-ascend DP group as a whole, anything else
alone, through the executor, under the deploy lock, with the reason in the deployment's history. `--once` probes
once (for cron: the probe before is kept in `.deployctl/<name>/watch.json` beside the spec); `--dry-run` says what it
would restart and restarts nothing. With --output json: one JSON line per observation and per action."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from deployctl.errors import DeployctlError, ExitStatus

STATE_FILE = "watch.json"
STATE_VERSION = 1


@dataclass
class WatchState:
    """What one probe leaves for the next: each server's observation, each container's newest log stamp read, and
    when watch last restarted it."""

    observations: dict = field(default_factory=dict)  # name -> Observation
    log_since: dict = field(default_factory=dict)  # name -> docker log stamp
    restarted: dict = field(default_factory=dict)  # name -> time
    # how the front names each host's servers (front_addresses), read at this run's first restart; never saved
    front_names: Optional[dict] = field(default=None, compare=False, repr=False)

    @classmethod
    def load(cls, path: Path, warn=None) -> "WatchState":
        """The state the last probe left; none yet (this probe is the first), or rebuilt empty where the file is
        damaged, which `warn` (a callable) is told with what is wrong: the restarts it remembers are only a
        start-up grace, the observations only the probe before, so the worst of starting afresh is one probe
        more before a stall is confirmed."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError) as error:
            return cls._afresh(path, warn, getattr(error, "strerror", None) or str(error))
        try:
            return cls._parse(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
            return cls._afresh(path, warn, str(error)[:200])

    @classmethod
    def _afresh(cls, path: Path, warn, why: str) -> "WatchState":
        if warn is not None:
            warn(f"{path} is damaged ({why}): it is rebuilt, this probe counts as the first")
        return cls()

    @classmethod
    def _parse(cls, doc) -> "WatchState":
        from deployctl.facts.docker_logs import stamp_seconds
        from deployctl.plan.watch import Observation, finite_number

        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, not {STATE_VERSION}")
        observations, log_since, restarted = (doc.get(k, {}) for k in ("observations", "log_since", "restarted"))
        for key, value in (("observations", observations), ("log_since", log_since), ("restarted", restarted)):
            if not isinstance(value, dict):
                raise ValueError(f"{key} is not a JSON object")
        # each is handed back to `docker logs --since`: a docker stamp, nothing else
        bad = [v for v in log_since.values() if not (isinstance(v, str) and stamp_seconds(v) is not None)]
        if bad:
            raise ValueError(f"log_since {bad[0]!r} is not a docker log timestamp")
        return cls({k: Observation.from_json(v) for k, v in observations.items()}, dict(log_since),
                   {k: finite_number(v, f"restarted.{k}") for k, v in restarted.items()})

    def save(self, path: Path) -> None:
        doc = {"version": STATE_VERSION, "observations": {k: v.to_json() for k, v in self.observations.items()},
               "log_since": self.log_since, "restarted": self.restarted}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)


def run(args, ui) -> int:
    from deployctl.hosts import connect_options, connected
    from deployctl.spec.load import load_spec
    from deployctl.ui import escape

    spec = load_spec(args.spec, unresolved_env="allow")  # env values are never sent here
    path = spec.state_dir / STATE_FILE
    state = WatchState.load(path, warn=lambda message: ui.info(f"[yellow]{escape(message)}[/]"))
    out = Output(ui)
    with connected(spec, options=connect_options(args, ui)) as transports:
        while True:
            started = time.monotonic()
            code = watch_once(spec, transports, state, args, out)
            state.save(path)
            if args.once:
                return code
            left = args.interval - (time.monotonic() - started)
            if left > 0:
                time.sleep(left)  # the probe period; Ctrl-C ends the loop (exit 130)


def watch_once(spec, transports, state: WatchState, args, out: "Output") -> int:
    """One probe of every host, the verdicts, and the restarts they call for; the exit status of a --once run."""
    from deployctl.plan.watch import judge, restart_plan, restarts, starting_up
    from deployctl.plan.watch_probes import is_front

    observations = probe(spec, transports, state, args.hang_timeout)
    grace = _health_timeout(spec, args)
    verdicts = []
    for current in observations:
        restarted = state.restarted.get(current.instance)
        instance = next(i for i in spec.instances if i.name == current.instance)
        verdict = judge(state.observations.get(current.instance), current, front=is_front(spec, instance),
                        starting=starting_up(current, restarted, grace),
                        hang_timeout=args.hang_timeout)
        verdicts.append(verdict)
        out.observation(current, verdict)
        if current.state != "unreachable":
            state.observations[current.instance] = current
    code = ExitStatus.OK
    if any(v.state == "missing" for v in verdicts):
        code = ExitStatus.NOT_THERE
    unseen = [v for v in verdicts if v.state == "unreachable"]
    if unseen:  # nothing can be said of them: a cron job must not read that as all well
        code = ExitStatus.FAILED
        for host in dict.fromkeys(v.host for v in unseen):
            mine = [v for v in unseen if v.host == host]
            out.unseen(host, len(mine), mine[0].reason)
    failed_roles: set = set()
    for restart in restarts(spec, verdicts):
        roles = {i.role for i in restart.instances}
        if roles & failed_roles:
            # one unit of its role did not come back: taking another out could leave the front none of them
            out.action(restart, "deferred", restart_plan(spec, restart, {}),
                       f"a restart of its role ({', '.join(sorted(roles & failed_roles))}) failed in this probe")
            continue
        result = act(spec, transports, state, restart, observations, args, out)
        if result == "failed":
            failed_roles |= roles
            code = ExitStatus.FAILED
        elif result == "would restart" and code == ExitStatus.OK:
            code = ExitStatus.CHECKS  # --dry-run: a server needs a restart it did not get
    return int(code)


def probe(spec, transports, state: WatchState, hang_timeout: float) -> list:
    """Every serving host at once, one batch each, its answers made facts as every command makes them; a host
    that cannot be asked shows its servers as unreachable."""
    from deployctl.facts.assemble import host_facts_from
    from deployctl.fanout import on_hosts
    from deployctl.gather import run_probes
    from deployctl.plan.watch_probes import observe, watch_probes

    now = time.time()
    known = {name: obs.container_id for name, obs in state.observations.items()}
    secrets = _secrets(spec)
    serving = {i.host for i in spec.instances}
    failures: dict[str, str] = {}  # host -> why it did not answer (said with its servers, redacted)

    def one(transport):
        probes = watch_probes(spec, transport.name, state.log_since, hang_timeout)
        try:
            return host_facts_from(run_probes(transport, probes, timeout=60))
        except DeployctlError as error:
            from deployctl.diagnose.redact import redact_text

            failures[transport.name] = redact_text(error.message, secrets)
            return None

    facts = on_hosts({name: t for name, t in transports.items() if name in serving}, one)
    observations = []
    for host, found in facts.items():
        seen = observe(spec, host, found, now, known, secrets)
        if host in failures:
            from dataclasses import replace

            seen = [replace(o, detail=f"its host did not answer this probe: {failures[host]}") for o in seen]
        observations.extend(seen)
        for name, new in ((found.new_log_lines if found else None) or {}).items():
            if new.last:
                state.log_since[name] = new.last
    return observations


def front_addresses(spec, transports) -> dict[str, str]:
    """How the front names each host's servers, where it can change its list: vllm-ascend's proxy lists each host
    by the address its NIC holds (its flavour's host_networks), read here in one round trip per
    serving host."""
    from deployctl.plan.front import front_of, reach
    from deployctl.servers import flavour_of

    front = front_of(spec)
    if front is None or not front.changes_list:
        return {}
    flavour = flavour_of(spec)
    probes = flavour.network_probes(spec)
    if not probes:
        return reach(spec)
    from deployctl.facts.assemble import host_facts_from
    from deployctl.fanout import on_hosts
    from deployctl.gather import run_probes

    used = {h.name for h in spec.used_hosts}
    answers = on_hosts({n: t for n, t in transports.items() if n in used},
                       lambda t: host_facts_from(run_probes(t, probes)))
    return reach(spec, flavour.host_networks(spec, answers))


def front_names(spec, transports, state: WatchState) -> dict[str, str]:
    """front_addresses, read once per run: the hosts' addresses do not change while watch runs."""
    if state.front_names is None:
        state.front_names = front_addresses(spec, transports)
    return state.front_names


def act(spec, transports, state: WatchState, restart, observations, args, out: "Output") -> str:
    """Restart one unit (or say it would): under the deploy lock, its reason in the history."""
    from deployctl.execute import Executor
    from deployctl.lock import DeployLock
    from deployctl.plan.watch import history_record, missing_members, restart_plan
    from deployctl.ui.events import up_events

    observed = {o.instance: o.container_id for o in observations}
    absent = missing_members(restart, observed)
    if absent:  # a group with a rank missing (or on a host that did not answer) would never serve again
        plan = restart_plan(spec, restart, observed)
        out.action(restart, "skipped", plan, f"no container seen for {', '.join(absent)}: `deployctl up` "
                                             "recreates what is missing")
        return "skipped"
    plan = restart_plan(spec, restart, observed, front_names(spec, transports, state),
                        getattr(args, "shutdown_timeout", None))
    if args.dry_run:
        out.action(restart, "would restart", plan)
        return "would restart"
    out.action(restart, "restarting", plan)
    first = transports[spec.first_host.name]
    result, error = "failed", None
    try:
        with DeployLock(first, spec.remote_state_dir, "watch", wait=args.lock_wait) as lock:
            try:
                with up_events(out.progress_ui) as on_event:
                    report = Executor(transports, on_event=on_event,
                                      health_timeout=_health_timeout(spec, args)).execute(plan)
                result = "ok" if not report.failed else "failed"
                if report.failed and report.error:
                    from deployctl.diagnose.redact import redact_text

                    error = redact_text(report.error.message, _secrets(spec))  # it may quote a host's stderr
            finally:
                lock.history = history_record(restart, result)
    except DeployctlError as exc:  # the lock is held (an `up` runs): try again at the next probe
        out.action(restart, "deferred", plan, exc.message)
        return "deferred"
    now = time.time()
    for instance in restart.instances:
        state.restarted[instance.name] = now
        state.observations.pop(instance.name, None)  # its counters start again from 0
    out.action(restart, result, plan, error)
    return result


def _secrets(spec) -> tuple[str, ...]:
    """The values diagnose redacts (diagnose/redact.py): every text of a host watch quotes goes through it."""
    from deployctl.diagnose.redact import secret_values

    return secret_values(spec, os.environ)


def _health_timeout(spec, args) -> float:
    from deployctl.commands.up import health_timeout

    return health_timeout(spec, args)


class Output:
    """One line per observation and per action: a table row for people, a JSON document per line with --output
    json (stdout); the executor's step lines go to stderr."""

    def __init__(self, ui) -> None:
        self.ui = ui
        self.progress_ui = ui

    def _line(self, doc: dict, text: str) -> None:
        if self.ui.json:
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()
            self.ui.emitted = True
        else:
            self.ui.print(text)

    def observation(self, obs, verdict) -> None:
        from deployctl.ui import escape

        style = {"stalled": "red", "engine-dead": "red", "down": "red", "unresponsive": "red", "missing": "yellow",
                 "suspect": "yellow", "unhealthy": "yellow", "unreachable": "yellow"}.get(verdict.state, "green")
        stamp = time.strftime("%H:%M:%S", time.localtime(obs.time))
        self._line({"type": "observation", **obs.to_json(), "verdict": verdict.state, "reason": verdict.reason,
                    "signatures": [list(s) for s in obs.signatures]},
                   f"{stamp} {obs.host} {obs.instance}: [{style}]{verdict.state}[/] — {escape(verdict.reason)}")

    def unseen(self, host: str, count: int, why: str) -> None:
        """A host whose servers this probe could not see (exit 1)."""
        from deployctl.ui import escape

        self._line({"type": "unseen", "host": host, "servers": count, "reason": why},
                   f"{time.strftime('%H:%M:%S')} {host}: [red]{count} server(s) unseen[/] — {escape(why)}: "
                   "nothing is known of them, nothing restarted (exit 1)")

    def action(self, restart, result: str, plan, error: Optional[str] = None) -> None:
        from deployctl.ui import escape

        doc = {"type": "action", "action": "restart", "result": result, **restart.to_json(),
               "steps": plan.to_json()["steps"], **({"error": error} if error else {})}
        names = ", ".join(i.name for i in restart.instances)
        text = f"{time.strftime('%H:%M:%S')} {result} {restart.unit} ({names})"
        if result in ("would restart", "restarting"):
            text += f" — {escape(restart.reason)}"
            if result == "would restart" and not self.ui.json:
                text += "".join(f"\n    {s['host']}: {escape(shlex.join(s['argv']))}" for s in doc["steps"]
                                if s["argv"])
        elif error:
            text += f" — {escape(error)}"
        self._line(doc, text)
