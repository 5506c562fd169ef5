"""The Prometheus metric names each server writes on its /metrics (pure): what `deployctl monitor`'s dashboard and
alert rules query. A flavour names its set (`Flavour.metrics`); nothing else spells a server's metric names."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class ServerMetrics:
    """One server's metric names. Histograms are named without `_bucket`; counters with `_total`, as scraped."""

    source: str  # where the names were read, for the generated files' comments
    ttft: str  # histogram: time to first token, seconds
    tpot: str  # histogram: time between output tokens, seconds
    e2e: str  # histogram: whole-request latency, seconds
    running: str  # gauge: requests in the running batch
    waiting: str  # gauge: requests queued
    kv_usage: str  # gauge 0..1: KV cache in use
    preemptions: str  # counter
    generation_tokens: str  # counter
    prompt_tokens: str  # counter
    queue_time: str  # histogram: a finished request's time waiting for its first schedule, seconds
    prefill_time: str  # histogram: scheduled to first token, seconds
    decode_time: str  # histogram: first token to last, seconds
    prompt_len: str  # histogram: a finished request's prompt tokens
    generation_len: str  # histogram: a finished request's generated tokens
    finished: Optional[str] = None  # counter with label finished_reason: requests finished (None: not served)
    kv_loaded: Optional[str] = None  # counter: prompt tokens a KV connector loaded from elsewhere (P/D: prefill)
    kv_looked_up: Optional[str] = None  # counter: prompt tokens a KV connector was asked for
    kv_fetching: Optional[str] = None  # gauge with label stage: requests waiting on an async KV load (decode)


# vLLM v1's PrometheusStatLogger (vLLM 0.33.0 vllm/v1/metrics/loggers.py: gauges at :528-623, counters at
# :739-811 — prometheus_client adds `_total` to a Counter's name — vllm:request_success with its finished_reason
# label at :807-819, the per-request length histograms at :864-882, the latency and phase histograms at
# :931-1008; the same names in vLLM's examples/online_serving/prometheus_grafana/grafana.json). The OpenAI server
# (AscendCloud's fork, vllm-ascend's `vllm serve`, vLLM on GPU) serves them on its API port at /metrics.
VLLM_V1 = ServerMetrics(
    source="vLLM 0.33.0 vllm/v1/metrics/loggers.py",
    ttft="vllm:time_to_first_token_seconds",
    tpot="vllm:inter_token_latency_seconds",
    e2e="vllm:e2e_request_latency_seconds",
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    kv_usage="vllm:kv_cache_usage_perc",
    preemptions="vllm:num_preemptions_total",
    generation_tokens="vllm:generation_tokens_total",
    prompt_tokens="vllm:prompt_tokens_total",
    queue_time="vllm:request_queue_time_seconds",
    prefill_time="vllm:request_prefill_time_seconds",
    decode_time="vllm:request_decode_time_seconds",
    prompt_len="vllm:request_prompt_tokens",
    generation_len="vllm:request_generation_tokens",
    finished="vllm:request_success_total",
)

# vllm-ascend P/D moves KV through its Mooncake connector, which exports no metric of its own (vllm-ascend
# HEAD:vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py has no build_prom_metrics; vLLM's own
# Mooncake connector neither: vllm/distributed/kv_transfer/kv_connector/v1/mooncake/stats.py:15-16 "TODO: add
# MooncakePromMetrics"; only NIXL's has some, vllm:nixl_*, nixl/stats.py:162-279, and no deployctl shape runs
# NIXL). What every vLLM with a connector exports: the connector's lookups (vllm:external_prefix_cache_queries/
# _hits, loggers.py:685-706, fed by the scheduler for each new request, scheduler.py:1039-1042: on a decode the
# hits are the prompt tokens loaded from its prefill) and, on a kv_consumer, its waiting requests by KV load stage
# (vllm:num_requests_kv_fetch_by_stage, loggers.py:569-591; a recent vLLM only).
VLLM_KV_CONNECTOR = replace(
    VLLM_V1, kv_loaded="vllm:external_prefix_cache_hits_total",
    kv_looked_up="vllm:external_prefix_cache_queries_total", kv_fetching="vllm:num_requests_kv_fetch_by_stage")

# Triton's vLLM backend re-exports vLLM's stats through Triton's own metrics service (--metrics-port) under its
# older names (triton-inference-server/vllm_backend src/utils/metrics.py, TritonMetrics: time_per_output_token,
# gpu_cache_usage_perc), only when the model's config sets REPORT_CUSTOM_METRICS; it has no request_success.
TRITON_VLLM_BACKEND = replace(
    VLLM_V1, source="triton-inference-server/vllm_backend src/utils/metrics.py",
    tpot="vllm:time_per_output_token_seconds", kv_usage="vllm:gpu_cache_usage_perc", finished=None)

# vLLM v0 wrote its preemption counter without `_total` (and called the KV-cache gauge gpu_cache_usage_perc, as
# Triton's backend still does): older images are read too.
OLDER_NAMES = {"preemptions": ("vllm:num_preemptions",)}
