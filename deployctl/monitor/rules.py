"""Prometheus alerting rules for one deployment (pure): the silent failures deployctl knows — a hang (tokens flat
while requests are held), the KV cache full with preemptions, a rank missing, the front down, HCCL errors in a
container's log."""

from __future__ import annotations

from deployctl.monitor.durations import duration
from deployctl.monitor.known_errors import hccl_signature_ids
from deployctl.monitor.queries import Queries


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def alert_rules(q: Queries, api_servers: int, deployed: bool = True) -> dict:
    """The rule file's document: one group named after the deployment (empty after `down`)."""
    twice = duration(2 * q.scrape_ms)
    # a target gone for three scrapes, still gone three intervals later: neither one slow scrape nor the first
    # seconds of a Prometheus that has not scraped everything yet
    thrice = duration(3 * q.scrape_ms)
    rules = [] if not deployed else [
        _alert("DeployctlServerHung", q.hang(), "0s", "critical",
               "{{ $labels.instance }} holds requests but generated no token for two scrapes",
               "Requests are running or waiting on {{ $labels.instance }} (role {{ $labels.role }}, rank "
               "{{ $labels.rank }} on {{ $labels.host }}) and vllm's generated-token counter did not move: an "
               "engine stuck in a collective (HCCL) looks like this. `deployctl status SPEC` says `hung`; "
               "`deployctl diagnose SPEC` collects the logs."),
        _alert("DeployctlKvCacheFull", q.kv_full(), twice, "warning",
               "{{ $labels.instance }}: KV cache full and preempting",
               "The KV cache of {{ $labels.instance }} is full and the engine preempts sequences (recomputed "
               "later): latency grows with load. Add instances, lower max_num_seqs, or raise the cache."),
        _alert("DeployctlRankDown", q.rank_down(), thrice, "critical",
               "{{ $labels.instance }} has not answered /metrics for three scrapes",
               "Prometheus cannot scrape {{ $labels.instance }} ({{ $labels.role }} on {{ $labels.host }}): "
               "its container stopped or its host is unreachable. `deployctl status SPEC`."),
        _alert("DeployctlRanksMissing", q.ranks_missing(api_servers), thrice, "critical",
               f"fewer than {api_servers} API servers of {q.deployment} are up",
               f"{q.deployment} runs {api_servers} API servers; fewer answer /metrics (or their targets are "
               "gone). `deployctl status SPEC`."),
        _alert("DeployctlFrontDown", q.front_down(), thrice, "critical",
               "the front of {{ $labels.deployment }} fails its health check",
               "{{ $labels.instance }} ({{ $labels.role }}) does not answer its health path with 200: "
               "requests to the endpoint fail. `deployctl status SPEC`, `deployctl logs SPEC`."),
        _alert("DeployctlHcclErrors", q.known_errors(hccl_signature_ids()), "0s", "critical",
               "{{ $labels.container }}: HCCL errors in its log ({{ $labels.signature }})",
               "deployctl's log scan (`deployctl monitor SPEC --scan-logs DIR`, served by node_exporter's "
               "textfile collector) found lines of the known-error signature {{ $labels.signature }} in "
               "{{ $labels.container }} on {{ $labels.host }}. `deployctl diagnose SPEC` names the fix."),
    ]
    return {"groups": [{"name": f"deployctl-{q.deployment}", "interval": duration(q.scrape_ms), "rules": rules}]}
