"""The regression gate: compare runs with an earlier `bench` JSON document (pure)."""

from __future__ import annotations

from dataclasses import dataclass

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
