"""GET /metrics: the emulated KV caches' state in Prometheus' text format, with vLLM v1's metric names, help
texts and labels (model_name = the first served name, engine = the engine index), as prometheus_client writes
them (a counter's HELP/TYPE carry its `_total` name; the `_created` series are left out). One series per engine
the API server fronts: vLLM's PrometheusStatLogger labels every metric ["model_name", "engine"] with one label
set per engine index (0.33.0 vllm/v1/metrics/loggers.py:499-505), so an internal DP launch of dp engines behind
one API server shows dp series of each."""

from __future__ import annotations

from typing import Sequence, Tuple

from standin.kvcache import FINISH_REASONS, KvCache

# the async KV load stages of a kv_consumer's waiting requests (KV_FETCH_STAGES, vllm/v1/metrics/stats.py:212-219)
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_1 = "text/plain; version=1.0.0; charset=utf-8"  # prometheus_client >= 0.22's CONTENT_TYPE_LATEST


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(caches: Sequence[Tuple[str, KvCache]], model_name: str, kv_consumer: bool = False) -> bytes:
    """`caches`: (engine index, its cache) for every engine behind this API server; `kv_consumer`: a P/D decode
    (its KV fetch gauge exists only there, loggers.py:569-591)."""
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
    if kv_consumer:
        # the stand-in loads KV synchronously: no request ever waits in a stage
        lines.append("# HELP vllm:num_requests_kv_fetch_by_stage Number of waiting requests by async KV load stage. "
                     "Stage labels: 'waiting_to_start' = needs an async KV load that has not started; "
                     "'in_progress' = load started and not yet reported finished; 'completed_waiting' = load "
                     "finished, request not running yet.")
        lines.append("# TYPE vllm:num_requests_kv_fetch_by_stage gauge")
        for engine, _cache in caches:
            for stage in KV_FETCH_STAGES:
                lines.append(f'vllm:num_requests_kv_fetch_by_stage{{{labels(engine)},stage="{stage}"}} 0.0')
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", lambda c: c.usage())
    # loggers.py:685-706
    metric("vllm:external_prefix_cache_queries_total", "counter", "External prefix cache queries from KV connector "
           "cross-instance cache sharing, in terms of number of queried tokens.", lambda c: c.connector_queries)
    metric("vllm:external_prefix_cache_hits_total", "counter", "External prefix cache hits from KV connector "
           "cross-instance cache sharing, in terms of number of cached tokens.", lambda c: c.connector_hits)
    metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
           lambda c: c.preemptions)
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", lambda c: c.prompt_tokens)
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           lambda c: c.generation_tokens)
    def histogram(name: str, help_text: str, of) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} histogram")
        for engine, cache in caches:
            lines.extend(histogram_samples(name, labels(engine), of(cache)))

    # the names and help texts of 0.33.0 vllm/v1/metrics/loggers.py:931-967
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lambda c: c.ttft)
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lambda c: c.itl)
    histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lambda c: c.e2e)
    # loggers.py:970-1008 (REQUEST_LATENCY_BUCKETS) and :864-882 (the request_tokens buckets up to max_model_len)
    histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
              lambda c: c.queue)
    histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
              lambda c: c.inference)
    histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
              lambda c: c.prefill)
    histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
              lambda c: c.decode)
    histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", lambda c: c.prompt_len)
    histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", lambda c: c.generation_len)
    lines.append("# HELP vllm:request_success_total Count of successfully processed requests.")
    lines.append("# TYPE vllm:request_success_total counter")
    for engine, cache in caches:
        for reason in FINISH_REASONS:
            lines.append(f'vllm:request_success_total{{{labels(engine)},finished_reason="{reason}"}} '
                         f"{float(cache.finished[reason])!r}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def histogram_samples(name: str, labels: str, h) -> list:
    """One histogram's samples as prometheus_client writes them: cumulative _bucket series up to +Inf, then _sum
    and _count (`labels`: the label text inside the braces, without le)."""
    out, total = [], 0
    for bound, count in zip(h.bounds, h.counts):
        total += count
        out.append(f'{name}_bucket{{{labels},le="{float(bound)!r}"}} {float(total)!r}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(h.count)!r}')
    out.append(f"{name}_sum{{{labels}}} {float(h.sum)!r}")
    out.append(f"{name}_count{{{labels}}} {float(h.count)!r}")
    return out
