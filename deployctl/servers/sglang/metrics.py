"""SGLang's metric names (pure): its flavours' `metrics`."""

from __future__ import annotations

from deployctl.servers.metrics import ServerMetrics

# SGLang's metric names, read from SGLang 0.5.23 (the wheel's
# sglang/srt/observability/metrics_collector.py). They are served on the API port only with --enable-metrics
# (sglang/srt/entrypoints/http_server.py:314-317 mounts prometheus_client's app at /metrics,
# sglang/srt/utils/common.py:2843-2853), which the flavour always renders.
# TokenizerMetricsCollector (:1822 on): the latency histograms (:2040-2070), the token counters (:1855-1864) and
# the per-request length histograms (:1908-1927); SchedulerMetricsCollector (:334 on): the batch gauges
# (:365-376), the KV pool usage ratio (:405, 0..1), retractions, SGLang's preemption (:559), the queueing
# histogram (:838). SGLang has no prefill and decode phase histograms of their own: both phases are stages of
# sglang:per_stage_req_latency_seconds (:884, label `stage`, sglang/srt/observability/req_time_stats.py
# RequestStage), so the two names below are that histogram, whose panels sum its stages until the dashboard
# selects a stage. Its requests counter (:1941) has no finished_reason label: `finished` is None.
SGLANG = ServerMetrics(
    source="SGLang 0.5.23 sglang/srt/observability/metrics_collector.py",
    ttft="sglang:time_to_first_token_seconds",
    tpot="sglang:inter_token_latency_seconds",
    e2e="sglang:e2e_request_latency_seconds",
    running="sglang:num_running_reqs",
    waiting="sglang:num_queue_reqs",
    kv_usage="sglang:token_usage",
    preemptions="sglang:num_retracted_requests_total",
    generation_tokens="sglang:generation_tokens_total",
    prompt_tokens="sglang:prompt_tokens_total",
    queue_time="sglang:queue_time_seconds",
    prefill_time="sglang:per_stage_req_latency_seconds",
    decode_time="sglang:per_stage_req_latency_seconds",
    prompt_len="sglang:prompt_tokens_histogram",
    generation_len="sglang:generation_tokens_histogram",
    finished=None,
)
