"""Summary statistics of latency samples: mean and percentiles by linear interpolation (pure)."""

from __future__ import annotations

from typing import Optional, Sequence

PERCENTILES = (50, 90, 95, 99)
SUMMARY_KEYS = ("mean", "p50", "p90", "p95", "p99")


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """The pct-th percentile of already sorted values, linear between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = (len(sorted_values) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def summarize(values: Sequence[float]) -> dict[str, Optional[float]]:
    """{"mean", "p50", "p90", "p95", "p99"}; every value None when there are no samples."""
    if not values:
        return {key: None for key in SUMMARY_KEYS}
    ordered = sorted(values)
    out: dict[str, Optional[float]] = {"mean": sum(ordered) / len(ordered)}
    for pct in PERCENTILES:
        out[f"p{pct}"] = percentile(ordered, pct)
    return out
