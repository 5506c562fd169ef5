"""The Prometheus metric names each server writes on its /metrics (pure): what `deployctl monitor`'s dashboard and
alert rules query. A flavour names its set (`Flavour.metrics`); nothing else spells a server's metric names."""

from __future__ import annotations

from dataclasses import dataclass, replace


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


# vLLM v1's PrometheusStatLogger (vLLM 0.33.0 vllm/v1/metrics/loggers.py: gauges at :528-623, counters at
# :739-811 — prometheus_client adds `_total` to a Counter's name — histograms at :931-964). The OpenAI server
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
)

# Triton's vLLM backend re-exports vLLM's stats through Triton's own metrics service (--metrics-port) under its
# older names (triton-inference-server/vllm_backend src/utils/metrics.py, TritonMetrics: time_per_output_token,
# gpu_cache_usage_perc), only when the model's config sets REPORT_CUSTOM_METRICS.
TRITON_VLLM_BACKEND = replace(
    VLLM_V1, source="triton-inference-server/vllm_backend src/utils/metrics.py",
    tpot="vllm:time_per_output_token_seconds", kv_usage="vllm:gpu_cache_usage_perc")
