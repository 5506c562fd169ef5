"""GET /metrics: the emulated KV cache's state in Prometheus' text format, with vLLM v1's metric names, help
texts and labels (model_name = the first served name, engine = the engine index), as prometheus_client writes
them (a counter's HELP/TYPE carry its `_total` name; the `_created` series are left out)."""

from __future__ import annotations

from standin.kvcache import FINISH_REASONS, KvCache

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(cache: KvCache, model_name: str, engine: str) -> bytes:
    labels = f'model_name="{_label(model_name)}",engine="{_label(engine)}"'
    lines = []

    def metric(name: str, kind: str, help_text: str, value) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{{{labels}}} {float(value)!r}")

    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", cache.running)
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", cache.waiting)
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", cache.usage())
    metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
           cache.preemptions)
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", cache.prompt_tokens)
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           cache.generation_tokens)
    lines.append("# HELP vllm:request_success_total Count of successfully processed requests.")
    lines.append("# TYPE vllm:request_success_total counter")
    for reason in FINISH_REASONS:
        lines.append(f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} '
                     f"{float(cache.finished[reason])!r}")
    return ("\n".join(lines) + "\n").encode("utf-8")
