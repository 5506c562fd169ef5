"""Saturation search (pure): the highest load — Poisson request rate or concurrency — whose run meets the SLOs,
in a bounded number of runs: multiply from the start until a run misses (exponential), then bisect between the
highest load that met and the lowest that missed (in log space) until they are within the precision. Stops early when the
client could not offer the load it was asked for: past that point it measures itself, not the server."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

CLIENT_SHORTFALL = 0.9  # a run that offered under 90 % of its target rate was limited by the client
MIN_RATE = 0.01  # req/s: below this a run would take hours


@dataclass(frozen=True)
class Probe:
    """One finished run as the search sees it."""

    load: float
    met: bool
    offered: Optional[float] = None  # rate: the rate the client actually sent at


@dataclass(frozen=True)
class SearchPlan:
    by: str  # rate | concurrency
    start: float
    max_runs: int = 12
    precision: float = 0.1  # stop when the bracket's top is within this fraction above its bottom
    factor: float = 4.0  # climbing; the bracket is then halved in log space, so the ratio shrinks fast


@dataclass(frozen=True)
class Verdict:
    """Where the search stands: the next load to run, or why it stopped."""

    next_load: Optional[float]
    max_meeting: Optional[float]
    first_missing: Optional[float]
    stopped: str = ""


def _client_bound(plan: SearchPlan, probe: Probe) -> bool:
    return plan.by == "rate" and probe.offered is not None and probe.offered < CLIENT_SHORTFALL * probe.load


def decide(plan: SearchPlan, probes: Sequence[Probe]) -> Verdict:
    """The next load to try given what ran, or the answer."""
    met = [p.load for p in probes if p.met and not _client_bound(plan, p)]
    missed = [p.load for p in probes if not p.met]
    best = max(met) if met else None
    worst = min((m for m in missed if best is None or m > best), default=None)
    bound = next((p for p in probes if _client_bound(plan, p)), None)
    if bound is not None:
        return Verdict(None, best, worst, f"the client offered only {bound.offered:.1f} req/s of {bound.load:g}: "
                                          "past this it measures itself, not the server")
    if probes and best is None:  # the start was too high: come down
        lowest = min(missed)
        lower = _step(plan, lowest / plan.factor)
        if lower >= lowest or lower < MIN_RATE or len(probes) >= plan.max_runs:
            return Verdict(None, None, worst, f"the lowest load tried ({lowest:g}) already misses the SLOs")
        return Verdict(lower, None, worst)
    if worst is not None and best is not None and _close(plan, best, worst):
        return Verdict(None, best, worst, f"bracketed: {best:g} meets, {worst:g} misses")
    if len(probes) >= plan.max_runs:
        return Verdict(None, best, worst, f"run budget spent ({plan.max_runs} runs)")
    if not probes:
        return Verdict(plan.start, None, None)
    if worst is None:  # still climbing
        return Verdict(_step(plan, best * plan.factor), best, None)
    return Verdict(_between(plan, best, worst), best, worst)


def _close(plan: SearchPlan, best: float, worst: float) -> bool:
    return worst <= best * (1 + plan.precision) or (plan.by == "concurrency" and worst - best <= 1)


def _between(plan: SearchPlan, best: float, worst: float) -> float:
    """The bracket's geometric middle; a whole concurrency strictly inside it (_close leaves room for one)."""
    middle = math.sqrt(best * worst)
    if plan.by == "concurrency":
        return float(min(max(round(middle), best + 1), worst - 1))
    return _step(plan, middle)


def _step(plan: SearchPlan, load: float) -> float:
    """Concurrency is whole; a rate keeps three significant digits (a run's label stays readable)."""
    if plan.by == "concurrency":
        return float(max(1, int(load)))
    return float(f"{load:.3g}")
