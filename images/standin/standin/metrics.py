"""GET /metrics: the emulated KV caches' state in Prometheus' text format, with vLLM v1's metric names, help
texts and labels (model_name = the first served name, engine = the engine index), as prometheus_client writes
them (a counter's HELP/TYPE carry its `_total` name; the `_created` series are left out). One series per engine
the API server fronts: vLLM's PrometheusStatLogger labels every metric ["model_name", "engine"] with one label
set per engine index (0.33.0 vllm/v1/metrics/loggers.py:499-505), so an internal DP launch of dp engines behind
one API server shows dp series of each."""

from __future__ import annotations

from typing import Sequence, Tuple

from standin.kvcache import FINISH_REASONS, KvCache

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(caches: Sequence[Tuple[str, KvCache]], model_name: str) -> bytes:
    """`caches`: (engine index, its cache) for every engine behind this API server."""
    lines = []

    def labels(engine: str) -> str:
        return f'model_name="{_label(model_name)}",engine="{_label(engine)}"'

    def metric(name: str, kind: str, help_text: str, value_of) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for engine, cache in caches:
            lines.append(f"{name}{{{labels(engine)}}} {float(value_of(cache))!r}")

    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           lambda c: c.running)
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", lambda c: c.waiting)
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", lambda c: c.usage())
    metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
           lambda c: c.preemptions)
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", lambda c: c.prompt_tokens)
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           lambda c: c.generation_tokens)
    def histogram(name: str, help_text: str, of) -> None:
        # prometheus_client's text: cumulative _bucket series up to +Inf, then _sum and _count
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} histogram")
        for engine, cache in caches:
            h = of(cache)
            total = 0
            for bound, count in zip(h.bounds, h.counts):
                total += count
                lines.append(f'{name}_bucket{{{labels(engine)},le="{float(bound)!r}"}} {float(total)!r}')
            lines.append(f'{name}_bucket{{{labels(engine)},le="+Inf"}} {float(h.count)!r}')
            lines.append(f"{name}_sum{{{labels(engine)}}} {float(h.sum)!r}")
            lines.append(f"{name}_count{{{labels(engine)}}} {float(h.count)!r}")

    # the names and help texts of 0.33.0 vllm/v1/metrics/loggers.py:931-967
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lambda c: c.ttft)
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lambda c: c.itl)
    histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lambda c: c.e2e)
    lines.append("# HELP vllm:request_success_total Count of successfully processed requests.")
    lines.append("# TYPE vllm:request_success_total counter")
    for engine, cache in caches:
        for reason in FINISH_REASONS:
            lines.append(f'vllm:request_success_total{{{labels(engine)},finished_reason="{reason}"}} '
                         f"{float(cache.finished[reason])!r}")
    return ("\n".join(lines) + "\n").encode("utf-8")
