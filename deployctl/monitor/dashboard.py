"""The Grafana dashboard of one deployment (pure): latency from vLLM's histograms, the batch and the KV cache per
rank, each NPU card's utilisation, HBM, temperature and power, and the P:D balance; plus the provisioning files
that load it and point it at Prometheus."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from deployctl.monitor import npu_exporter
from deployctl.monitor.queries import Queries

if TYPE_CHECKING:
    from deployctl.fronts.base import RouterMetrics

DATASOURCE_UID = "deployctl-prometheus"
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    description: str = ""


def panels(q: Queries, npu: bool, disaggregated: bool,
           router: Optional["RouterMetrics"] = None) -> tuple[Panel, ...]:
    """Every panel in order; NPU panels only where an NPU exporter is scraped, P:D balance only for P/D, the
    router's own only for a vllm-router front."""
    n = q.names
    by_rank = "{{instance}} ({{role}} g{{group}} r{{rank}})"
    out = [
        Panel("Time to first token", "s", tuple((q.quantile(n.ttft, p), f"p{int(p * 100)} {{{{role}}}}")
                                               for p in QUANTILES), f"{n.ttft} ({n.source})"),
        Panel("Time per output token", "s", tuple((q.quantile(n.tpot, p), f"p{int(p * 100)} {{{{role}}}}")
                                                  for p in QUANTILES), f"{n.tpot} ({n.source})"),
        Panel("End-to-end request latency", "s", tuple((q.quantile(n.e2e, p), f"p{int(p * 100)} {{{{role}}}}")
                                                       for p in QUANTILES), f"{n.e2e} ({n.source})"),
        Panel("Requests running", "short", ((q.per_rank(n.running), by_rank),), n.running),
        Panel("Requests waiting", "short", ((q.per_rank(n.waiting), by_rank),), n.waiting),
        Panel("KV cache usage", "percentunit", ((q.per_rank(n.kv_usage), by_rank),), n.kv_usage),
        Panel("Preemptions /s", "short", ((q.per_rank_rate(n.preemptions), by_rank),), n.preemptions),
        Panel("Generated tokens /s", "short", ((q.per_rank_rate(n.generation_tokens), by_rank),),
              n.generation_tokens),
    ]
    if n.finished:
        out.append(Panel("Requests finished /s by reason", "reqps",
                         ((q.by_role_rate(n.finished, "role, finished_reason"), "{{role}} {{finished_reason}}"),),
                         f"{n.finished}: stop, length, abort, error, repetition"))
    out += [
        Panel("Prompt length", "short", tuple((q.quantile(n.prompt_len, p), f"p{int(p * 100)} {{{{role}}}}")
                                              for p in QUANTILES), f"{n.prompt_len} (tokens per finished request)"),
        Panel("Generation length", "short", tuple((q.quantile(n.generation_len, p), f"p{int(p * 100)} {{{{role}}}}")
                                                  for p in QUANTILES),
              f"{n.generation_len} (tokens per finished request)"),
        Panel("Queue, prefill and decode time (mean)", "s",
              tuple((q.mean(name), f"{phase} {{{{role}}}}") for phase, name in
                    (("queue", n.queue_time), ("prefill", n.prefill_time), ("decode", n.decode_time))),
              f"{n.queue_time}, {n.prefill_time}, {n.decode_time}"),
    ]
    if disaggregated:
        out += [
            Panel("P:D balance: requests held", "short", ((q.in_flight_by_role(), "{{role}}"),),
                  "running + waiting on prefill against decode"),
            Panel("P:D balance: tokens /s", "short", ((q.tokens_by_role(), "{{role}}"),),
                  "prompt tokens into prefill, generated tokens out of decode"),
        ]
        if n.kv_loaded and n.kv_looked_up:
            out.append(Panel("KV transfer: prompt tokens loaded /s", "short",
                             ((q.by_role_rate(n.kv_loaded, role="decode"), "loaded {{role}}"),
                              (q.by_role_rate(n.kv_looked_up, role="decode"), "looked up {{role}}")),
                             f"{n.kv_loaded}: the prompt tokens whose KV the decode's connector pulled from "
                             f"prefill, of {n.kv_looked_up}"))
        if n.kv_fetching:
            out.append(Panel("KV transfer: requests waiting on a KV load", "short",
                             ((q.kv_fetching(), "{{role}} {{stage}}"),),
                             f"{n.kv_fetching} (a decode's async KV loads by stage)"))
    if npu:
        card = "{{host}} npu {{id}}"
        out += [
            Panel("NPU AI core utilisation", "percent", ((q.per_card(npu_exporter.UTILIZATION), card),),
                  f"{npu_exporter.UTILIZATION} ({npu_exporter.TITLE})"),
            Panel("NPU HBM used", "decmbytes", ((q.hbm_used(), card + " used"), (q.hbm_total(), card + " total")),
                  f"{npu_exporter.HBM_USED}, {npu_exporter.HBM_TOTAL}"),
            Panel("NPU temperature", "celsius", ((q.per_card(npu_exporter.TEMPERATURE), card),),
                  npu_exporter.TEMPERATURE),
            Panel("NPU power", "watt", ((q.per_card(npu_exporter.POWER), card),), npu_exporter.POWER),
        ]
    if router is not None:
        m = router
        route = "{{" + m.route_label + "}}"
        out += [
            Panel("Router: requests /s by route", "reqps", ((q.router_rate(m.requests, m.route_label), route),),
                  m.requests),
            Panel("Router: requests /s per worker", "reqps",
                  ((q.router_rate(m.per_worker, "worker"), "{{worker}}"),), m.per_worker),
            Panel("Router: workers", "short", ((q.router(m.health, "worker"), "healthy {{worker}}"),
                                               (q.router(m.pool), "active")),
                  f"{m.health} (1 healthy), {m.pool}"),
            Panel("Router: generate request duration", "s",
                  tuple((q.router_quantile(p, m.duration), f"p{int(p * 100)}") for p in QUANTILES), m.duration),
        ]
    out += [
        Panel("Targets up", "short", ((q.targets_up(), "{{job}} {{instance}}"),), "1: scraped"),
        Panel("Front health", "short", ((q.front_up(), "{{instance}}"),), "blackbox_exporter's probe_success"),
    ]
    return tuple(out)


def dashboard(q: Queries, title: str, npu: bool, disaggregated: bool,
              router: Optional["RouterMetrics"] = None) -> dict:
    """The dashboard JSON model (schemaVersion 39), two panels a row."""
    source = {"type": "prometheus", "uid": DATASOURCE_UID}
    items = []
    for number, panel in enumerate(panels(q, npu, disaggregated, router)):
        items.append({
            "id": number + 1, "type": "timeseries", "title": panel.title, "description": panel.description,
            "datasource": source,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (number % 2), "y": 8 * (number // 2)},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "datasource": source, "expr": expr, "legendFormat": legend}
                        for i, (expr, legend) in enumerate(panel.queries)],
        })
    return {"uid": f"deployctl-{q.deployment}"[:40], "title": title, "tags": ["deployctl"], "timezone": "utc",
            "schemaVersion": 39, "version": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
            "editable": True, "panels": items}


def datasource_provisioning(prometheus_url: str) -> dict:
    return {"apiVersion": 1, "datasources": [{"name": "deployctl Prometheus", "type": "prometheus",
                                              "uid": DATASOURCE_UID, "access": "proxy", "url": prometheus_url,
                                              "isDefault": True}]}


def dashboard_provisioning(path: str) -> dict:
    return {"apiVersion": 1, "providers": [{"name": "deployctl", "type": "file", "disableDeletion": False,
                                            "allowUiUpdates": False, "options": {"path": path}}]}
