"""Latency SLOs and goodput (pure): `--slo ttft_p99=2000ms,tpot_p99=50ms` as users write them; a run meets its
SLOs when each named statistic is within its limit, and its goodput counts the requests that each met every limit
on their own (vLLM's goodput), in req/s and output tokens/s."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from deployctl.bench.metrics import RequestRecord, e2el_ms, itl_ms, tpot_ms, ttft_ms

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p95", "p99")
_SLO = re.compile(r"^(?P<metric>[a-z0-9]+)_(?P<stat>[a-z0-9]+)=(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s)$")


class SloError(ValueError):
    """A `--slo` that does not parse; its message says what was expected."""


@dataclass(frozen=True)
class Slo:
    metric: str  # ttft | tpot | itl | e2el
    stat: str  # mean | p50 | p90 | p95 | p99
    limit_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}"


def parse_slos(text: str) -> tuple[Slo, ...]:
    """`ttft_p99=2000ms,tpot_p99=50ms,e2el_p90=10s`: metric ttft|tpot|itl|e2el, statistic mean|p50|p90|p95|p99."""
    slos: dict[str, Slo] = {}
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        match = _SLO.match(word)
        if not match:
            raise SloError(f"--slo {word!r}: expected METRIC_STAT=VALUE(ms|s), e.g. ttft_p99=2000ms or tpot_p99=50ms")
        metric, stat = match["metric"], match["stat"]
        if metric not in METRICS:
            raise SloError(f"--slo {word!r}: unknown metric {metric!r} (metrics: {', '.join(METRICS)})")
        if stat not in STATS:
            raise SloError(f"--slo {word!r}: unknown statistic {stat!r} (statistics: {', '.join(STATS)})")
        limit = float(match["value"]) * (1000.0 if match["unit"] == "s" else 1.0)
        if limit <= 0:
            raise SloError(f"--slo {word!r}: the limit must be above 0")
        slo = Slo(metric, stat, limit)
        if slo.name in slos:
            raise SloError(f"--slo: {slo.name} given twice")
        slos[slo.name] = slo
    if not slos:
        raise SloError("--slo: no SLO given (e.g. ttft_p99=2000ms,tpot_p99=50ms)")
    return tuple(slos.values())


def request_value(record: RequestRecord, metric: str) -> Optional[float]:
    """One request's own figure for a metric (ITL: its longest gap); None where it has none (TPOT of one token)."""
    if metric == "ttft":
        return ttft_ms(record)
    if metric == "tpot":
        return tpot_ms(record)
    if metric == "e2el":
        return e2el_ms(record)
    gaps = itl_ms(record)
    return max(gaps) if gaps else None


def meets(record: RequestRecord, slos: Sequence[Slo]) -> bool:
    """A request counts toward goodput when it succeeded and each of its figures is within every limit."""
    if not (record.ok and record.chunk_ns):
        return False
    for slo in slos:
        value = request_value(record, slo.metric)
        if value is not None and value > slo.limit_ms:
            return False
    return True


def slo_result(records: Sequence[RequestRecord], slos: Sequence[Slo], summary: dict) -> dict:
    """The run's `slo` entry: the limits, whether each statistic met its limit, and the goodput."""
    violations = []
    for slo in slos:
        observed = summary[f"{slo.metric}_ms"][slo.stat]
        if observed is None or observed > slo.limit_ms:
            violations.append({"slo": slo.name, "limit_ms": slo.limit_ms, "observed_ms": observed})
    good = [r for r in records if meets(r, slos)]
    duration_s = summary["duration_s"]
    per_s = (lambda value: value / duration_s) if duration_s > 0 else (lambda value: 0.0)
    return {
        "limits_ms": {slo.name: slo.limit_ms for slo in slos},
        "met": not violations,
        "violations": violations,
        "good_requests": len(good),
        "goodput_share": len(good) / len(records) if records else 0.0,
        "goodput_request_throughput": per_s(len(good)),
        "goodput_output_token_throughput": per_s(sum(r.output_tokens or 0 for r in good)),
    }

