"""The regression gate: compare runs with an earlier `bench` JSON document (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from deployctl.bench.report import run_key

# (metric, statistic, worse when) — throughput lower is worse, latency higher is worse
CHECKS = (("output_token_throughput", None, "lower"), ("ttft_ms", "p50", "higher"), ("ttft_ms", "p99", "higher"),
          ("tpot_ms", "p50", "higher"), ("tpot_ms", "p99", "higher"))


@dataclass(frozen=True)
class Regression:
    run: str  # e.g. "parallel_num=8 1024/128"
    metric: str  # e.g. "ttft_ms.p99"
    baseline: float
    current: float
    change_pct: float  # signed: + is higher than the baseline


MODES = ("static", "dynamic")
MAX_VALUE = 1e15  # no rate, latency or throughput a bench measures comes near it: a larger one is damage


def baseline_problem(doc) -> Optional[str]:
    """Why an earlier `bench` document cannot be compared with (where in it, and what), or None: it was written by
    deployctl, and may have been damaged since (wrong types, NaN, numbers no bench measures)."""
    if not isinstance(doc, dict) or doc.get("mode") not in MODES or not isinstance(doc.get("runs"), list):
        return "not a `deployctl bench` JSON document (needs mode static or dynamic, and a list of runs)"
    key = run_key(doc["mode"])
    for index, run in enumerate(doc["runs"]):
        where = f"runs[{index}]"
        if not isinstance(run, dict):
            return f"{where} is not an object"
        if key in run and _bad_number(run[key]):
            return f"{where}.{key}: {_shown(run[key])} is not a number from 0 to {MAX_VALUE:g}"
        for name in ("prompt_tokens", "output_tokens"):
            if run.get(name) is not None and _bad_number(run[name]):
                return f"{where}.{name}: {_shown(run[name])} is not a number from 0 to {MAX_VALUE:g}"
        for metric, stat, _ in CHECKS:
            value = run.get(metric)
            path = f"{where}.{metric}"
            if stat is not None and value is not None:
                if not isinstance(value, dict):
                    return f"{path} is not an object of statistics"
                value, path = value.get(stat), f"{path}.{stat}"
            if value is not None and _bad_number(value):
                return f"{path}: {_shown(value)} is not a number from 0 to {MAX_VALUE:g}"
    return None


def _bad_number(value) -> bool:
    return (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 <= value <= MAX_VALUE)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def match_key(mode: str, run: dict) -> tuple:
    return (mode, float(run[run_key(mode)]), run.get("prompt_tokens"), run.get("output_tokens"))


def compare(current: dict, baseline: dict, max_regression_pct: float) -> tuple[list[Regression], int]:
    """Regressions beyond the threshold, and how many runs had a baseline to compare with."""
    mode = current["mode"]
    earlier = {match_key(baseline.get("mode", ""), run): run for run in baseline.get("runs", [])
               if isinstance(run, dict) and run_key(baseline.get("mode", "")) in run}
    found: list[Regression] = []
    matched = 0
    for run in current["runs"]:
        old = earlier.get(match_key(mode, run))
        if old is None:
            continue
        matched += 1
        label = f"{run_key(mode)}={run[run_key(mode)]:g} {run['prompt_tokens']}/{run['output_tokens']}"
        for metric, stat, worse in CHECKS:
            before = old.get(metric)
            now = run.get(metric)
            if stat is not None:
                before = before.get(stat) if isinstance(before, dict) else None
                now = now.get(stat) if isinstance(now, dict) else None
            if not isinstance(before, (int, float)) or not isinstance(now, (int, float)) or before <= 0:
                continue
            change = (now - before) / before * 100.0
            if (worse == "higher" and change > max_regression_pct) or (worse == "lower" and -change > max_regression_pct):
                found.append(Regression(label, metric + (f".{stat}" if stat else ""), before, now, change))
    return found, matched
