"""Collects the time-to-serve ledger of one `up` (plan/ledger.py builds it): each step's start and end as the
executor reports them through `on_event` (nothing printed here), and each new server's own start-up log read back
once the deploy served."""

from __future__ import annotations

import time
from typing import Callable, Mapping, Optional

from deployctl.facts.startup_log import StartupMilestones, startup_log_probe
from deployctl.plan.actions import Build
from deployctl.plan.ledger import Ledger, StepSpan, build_ledger


class LedgerRecorder:
    """Wraps an executor's on_event: the same events go on, each step's times are kept."""

    def __init__(self, t0: Optional[float] = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.t0 = clock() if t0 is None else t0
        self.spans: list[StepSpan] = []
        self._open: dict[int, float] = {}
        self._read: tuple = ({}, {})  # the servers' milestones and instance hosts, once read
        self.cache_copies: dict[str, dict] = {}

    def wrap(self, on_event):
        def recording(kind: str, step, message: str) -> None:
            if kind == "start":
                self._open[id(step)] = self.clock()
            elif kind in ("done", "failed") and id(step) in self._open:
                start = self._open.pop(id(step))
                self.spans.append(StepSpan(step.stage, step.host, start, self.clock(), step.container,
                                           builds=any(isinstance(a, Build) for a in step.actions)))
            on_event(kind, step, message)

        return recording

    def span(self, stage: str, start: float) -> None:
        """Work of the control machine's outside the executor (the doctor's checks), from `start` to now."""
        self.spans.append(StepSpan(stage, "", start, self.clock()))

    def note(self, report) -> None:
        """What the executor's report tells beyond the steps' times: how each host got its compile cache."""
        for outcome in report.outcomes:
            self.cache_copies.update(outcome.copies)

    def ledger(self, milestones: Optional[Mapping[str, StartupMilestones]] = None,
               instance_hosts: Optional[Mapping[str, str]] = None) -> Ledger:
        """The ledger from t0 to now (without arguments: with what an earlier call was given)."""
        if milestones is not None or instance_hosts is not None:
            self._read = (milestones or {}, instance_hosts or {})
        return build_ledger(self.t0, self.clock(), self.spans, *self._read, self.cache_copies)


def read_milestones(spec, transports, spans: list[StepSpan]) -> dict[str, StartupMilestones]:
    """Each server started by this `up` (the workers stage): its start-up log, one round trip per host, all hosts
    at once. A host that cannot answer leaves its servers without log phases (the ledger says "deployctl")."""
    from deployctl.errors import DeployctlError
    from deployctl.fanout import on_hosts
    from deployctl.gather import run_probes
    from deployctl.servers import flavour_of

    startup = flavour_of(spec).startup(spec)
    started: dict[str, list[str]] = {}
    for span in spans:
        if span.stage == "workers" and span.container:
            started.setdefault(span.host, []).append(span.container)
    if startup is None or not started:
        return {}

    def read(transport) -> dict[str, StartupMilestones]:
        names = tuple(started.get(transport.name, ()))
        if not names:
            return {}
        probe = startup_log_probe(names, startup.log)
        try:
            ((_, output),) = run_probes(transport, (probe,), timeout=60)
        except DeployctlError:
            return {}
        return probe.parse(output.stdout)

    found: dict[str, StartupMilestones] = {}
    for part in on_hosts({h: t for h, t in transports.items() if h in started}, read).values():
        if isinstance(part, dict):
            found.update(part)
    return found
