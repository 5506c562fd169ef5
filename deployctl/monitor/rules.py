"""Prometheus alerting rules for one deployment (pure): the silent failures deployctl knows — a hang (tokens flat
while requests are held), the KV cache full with preemptions, a rank missing, the front down
or its prober, HCCL errors in a container's log and a log scan that stopped."""

from __future__ import annotations

from typing import Optional

from deployctl.monitor.durations import duration, millis
from deployctl.monitor.known_errors import hccl_signature_ids
from deployctl.monitor.queries import SLO_WINDOW, Queries

# A log scan older than this is stale: run `--scan-logs` from cron more often (every few minutes)
SCAN_MAX_AGE_S = 900


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def alert_rules(q: Queries, prober: str, ttft_p99: Optional[str] = None, deployed: bool = True) -> dict:
    """The rule file's document: one group named after the deployment (empty after `down`). Nothing in it depends
    on how many servers run (the server targets' `role_servers` label says that), so `up` changing the count
    leaves the file, and what Prometheus loaded from it, as it was."""
    twice = 2 * q.scrape_ms
    thrice = 3 * q.scrape_ms  # a target gone for the whole down window, still gone three intervals later
    rules = [] if not deployed else [
        _alert("DeployctlServerHung", q.hang(), q.hold(0), "critical",
               "{{ $labels.instance }} holds requests but generated no token for two scrapes",
               "Requests are running or waiting on {{ $labels.instance }} (role {{ $labels.role }}, rank "
               "{{ $labels.rank }} on {{ $labels.host }}) and vllm's generated-token counter did not move: an "
               "engine stuck in a collective (HCCL) looks like this. `deployctl status SPEC` says `hung`; "
               "`deployctl diagnose SPEC` collects the logs."),
        _alert("DeployctlKvCacheFull", q.kv_full(), q.hold(twice), "warning",
               "{{ $labels.instance }}: KV cache full and preempting",
               "The KV cache of {{ $labels.instance }} is full and the engine preempts sequences (recomputed "
               "later): latency grows with load. Add instances, lower max_num_seqs, or raise the cache."),
        _alert("DeployctlRankDown", q.rank_down(), q.hold(thrice), "critical",
               "{{ $labels.instance }} has not answered /metrics for " + q.down_window,
               "Prometheus cannot scrape {{ $labels.instance }} ({{ $labels.role }} on {{ $labels.host }}): "
               "its container stopped or its host is unreachable. `deployctl status SPEC`."),
        _alert("DeployctlRanksMissing", q.ranks_missing(), q.hold(thrice), "critical",
               "fewer than {{ $labels.role_servers }} {{ $labels.role }} API servers of {{ $labels.deployment }} "
               "answer",
               "{{ $labels.deployment }} runs {{ $labels.role_servers }} {{ $labels.role }} API servers (the "
               "targets' role_servers label); fewer answered /metrics in " + q.down_window + " or are in "
               "Prometheus' target list. `deployctl status SPEC`."),
        _alert("DeployctlFrontDown", q.front_down(), q.hold(thrice), "critical",
               "the front of {{ $labels.deployment }} fails its health check",
               "{{ $labels.instance }} ({{ $labels.role }}) does not answer its health path with 200: "
               "requests to the endpoint fail. `deployctl status SPEC`, `deployctl logs SPEC`."),
        _alert("DeployctlProberDown", q.prober_down(), q.hold(thrice), "warning",
               "blackbox_exporter at " + prober + " does not answer: the front of {{ $labels.deployment }} is "
               "not checked",
               "Prometheus reaches the front's health through blackbox_exporter (monitor.blackbox_exporter, "
               + prober + "), which did not answer for " + q.down_window + ": whether {{ $labels.instance }} "
               "serves is unknown. Start blackbox_exporter with the pack's blackbox.yml."),
        _alert("DeployctlHcclErrors", q.known_errors(hccl_signature_ids()), q.hold(0), "critical",
               "{{ $labels.container }}: HCCL errors in its log ({{ $labels.signature }})",
               "deployctl's log scan (`deployctl monitor SPEC --scan-logs DIR`, served by node_exporter's "
               "textfile collector) found lines of the known-error signature {{ $labels.signature }} in "
               "{{ $labels.container }} on {{ $labels.host }}. `deployctl diagnose SPEC` names the fix."),
        _alert("DeployctlLogScanStale", q.scan_stale(SCAN_MAX_AGE_S), q.hold(0), "warning",
               "the log scan of {{ $labels.deployment }} has not run for " + duration(SCAN_MAX_AGE_S * 1000),
               "`deployctl monitor SPEC --scan-logs DIR` last wrote its textfile more than "
               + duration(SCAN_MAX_AGE_S * 1000) + " ago: DeployctlHcclErrors sees nothing newer. Check the "
               "cron job that runs it."),
    ]
    if deployed and ttft_p99:
        rules.append(_alert(
            "DeployctlTtftSlo", q.ttft_above(millis(ttft_p99)), q.hold(millis(SLO_WINDOW)), "warning",
            "p99 time to first token of {{ $labels.role }} in {{ $labels.deployment }} above " + ttft_p99,
            "Over the last " + SLO_WINDOW + ", 99 % of the requests of {{ $labels.role }} got their first token "
            "within more than " + ttft_p99 + " (monitor.ttft_p99): requests wait (see Requests waiting, Queue "
            "time) or prompts grew. Add instances or lower max_num_batched_tokens."))
    return {"groups": [{"name": f"deployctl-{q.deployment}", "interval": duration(q.scrape_ms), "rules": rules}]}
