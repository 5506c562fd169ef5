"""Per-request records to one run's metrics, in the contract's `bench` JSON shape (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional, Sequence

from deployctl.bench.stats import summarize

NS_PER_MS = 1e6
NS_PER_S = 1e9


@dataclass(frozen=True)
class RequestRecord:
    """What one request did; times are wall-clock ns (the kernel's receive stamps share that clock)."""

    request_id: str
    ok: bool
    sent_ns: int  # right before the request's bytes went to an open connection: no answer is stamped earlier
    end_ns: int  # the response was complete (or found broken)
    chunk_ns: tuple[int, ...] = ()  # arrival of each chunk that carried non-empty text
    status: Optional[int] = None
    error: str = ""
    text: str = ""
    usage_prompt_tokens: Optional[int] = None
    usage_completion_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None  # counted in the contract's order (see tokens.py)
    output_tokens: Optional[int] = None


def ttft_ms(record: RequestRecord) -> float:
    return (record.chunk_ns[0] - record.sent_ns) / NS_PER_MS


def e2el_ms(record: RequestRecord) -> float:
    return (record.end_ns - record.sent_ns) / NS_PER_MS


def tpot_ms(record: RequestRecord) -> Optional[float]:
    """(E2E - TTFT) / (output tokens - 1); undefined for a one-token answer."""
    tokens = record.output_tokens or 0
    if tokens < 2:
        return None
    return (record.end_ns - record.chunk_ns[0]) / NS_PER_MS / (tokens - 1)


def itl_ms(record: RequestRecord) -> list[float]:
    """Gaps between token chunks: one gap per chunk after the first, whatever its token count."""
    chunks = record.chunk_ns
    return [(b - a) / NS_PER_MS for a, b in zip(chunks, chunks[1:])]


def summarize_run(records: Sequence[RequestRecord], **keys) -> dict:
    """One entry of `runs`: `keys` (parallel_num or request_rate, token lengths) then the measured figures.

    Failed requests count in `requests` and `failed` and in the errors tally; latencies and throughputs use
    the succeeded ones only. A success without any token chunk is impossible by construction (see client).
    """
    good = [r for r in records if r.ok and r.chunk_ns]
    sent = [r.sent_ns for r in records]
    ends = [r.end_ns for r in records]
    duration_s = (max(ends) - min(sent)) / NS_PER_S if sent and ends else 0.0
    prompt_total = sum(r.prompt_tokens or 0 for r in good)
    output_total = sum(r.output_tokens or 0 for r in good)

    def per_s(value: float) -> float:
        return value / duration_s if duration_s > 0 else 0.0

    tpots = [t for t in (tpot_ms(r) for r in good) if t is not None]
    itls = [gap for r in good for gap in itl_ms(r)]
    errors = Counter(r.error or f"HTTP {r.status}" for r in records if not (r.ok and r.chunk_ns))
    return {
        **keys,
        "requests": len(records),
        "succeeded": len(good),
        "failed": len(records) - len(good),
        "duration_s": duration_s,
        "request_throughput": per_s(len(good)),
        "input_token_throughput": per_s(prompt_total),
        "output_token_throughput": per_s(output_total),
        "total_token_throughput": per_s(prompt_total + output_total),
        "total_input_tokens": prompt_total,
        "total_output_tokens": output_total,
        "ttft_ms": summarize([ttft_ms(r) for r in good]),
        "tpot_ms": summarize(tpots),
        "itl_ms": summarize(itls),
        "e2el_ms": summarize([e2el_ms(r) for r in good]),
        "errors": dict(sorted(errors.items())),
    }
