"""A candidate's measurement (pure): its record from a `bench search` document, what bound it at the knee, and the
ranking: meets the SLOs first, then goodput per card, then fewer cards."""

from __future__ import annotations

from typing import Optional

KV_FULL = 0.95  # as bench/knee.py: a cache this full is full

# what bound a candidate, read from its first run past the highest load that met the SLOs
BINDINGS = {
    "kv_cache": "the KV cache was full (requests preempted or waiting for blocks)",
    "queue": "requests queued while the KV cache had room: max_num_seqs caps the batch",
    "ttft": "TTFT broke its limit first (prefill)",
    "tpot": "TPOT/ITL broke its limit first (decode batch)",
    "none": "every load tried met the SLOs",
    "unknown": "the bench does not say what bound it",
}


def binding(document: dict, max_num_seqs=None) -> str:
    """What bound the search: a key of BINDINGS. `max_num_seqs`: the candidate's; an engine seen running that many
    while TTFT broke was capped by it, though no sample caught a request waiting."""
    found = document.get("search") or {}
    key = "parallel_num" if document.get("mode") == "static" else "request_rate"
    missing = [r for r in document.get("runs", []) if not (r.get("slo") or {}).get("met", False) or r.get("failed")]
    if found.get("first_missing") is None and not missing:
        return "none"
    first = found.get("first_missing")
    run = next((r for r in missing if r.get(key) == first), missing[0] if missing else None)
    if run is None:
        return "unknown"
    telemetry = run.get("telemetry") or {}
    usage, waiting = telemetry.get("kv_cache_usage_max"), telemetry.get("waiting_max") or 0
    if (document.get("knee") or {}).get("cause") == "kv_cache_full" or (
            usage is not None and usage >= KV_FULL and (waiting or telemetry.get("preemptions"))):
        return "kv_cache"
    if waiting > 0 and usage is not None:
        return "queue"
    broken = {v["slo"].split("_")[0] for v in (run.get("slo") or {}).get("violations", [])}
    if broken and broken <= {"ttft"}:
        # A telemetry tick is an SSH round trip (~1 s on a loaded host): on a run of a few seconds it can read the
        # waiting gauge only after the queue has drained (the real vLLM engine on the bed, max_num_seqs 1 at
        # concurrency 4: running 1, waiting 0, TTFT p99 1.9 s); vLLM's running gauge at the cap says the same
        # (its scheduler runs at most max_num_seqs: max_num_running_reqs, vllm/v1/core/sched/scheduler.py)
        return "queue" if _batch_full(telemetry, max_num_seqs) else "ttft"
    if broken & {"tpot", "itl"}:
        return "tpot"
    return "unknown"


def _batch_full(telemetry: dict, max_num_seqs) -> bool:
    """An engine was seen running max_num_seqs requests at once."""
    if not isinstance(max_num_seqs, int) or isinstance(max_num_seqs, bool) or max_num_seqs < 1:
        return False
    return any((e.get("running_max") or 0) >= max_num_seqs for e in (telemetry.get("engines") or {}).values())


# the devices' figures each bench run's telemetry summary gives (bench/telemetry.py summarize_telemetry)
DEVICE_PEAKS = ("device_util_max_pct", "device_mem_max_pct", "device_temp_max_c", "kv_cache_usage_max")


def telemetry(document: dict, best_run: Optional[dict]) -> Optional[dict]:
    """The NPU/GPU telemetry of a candidate's bench: utilisation mean (over every sample of every run) and peaks
    across its runs, and the figures of `best_run` (the highest load that met the SLOs); None when nothing was
    sampled."""
    runs = [r for r in document.get("runs", []) if (r.get("telemetry") or {}).get("samples")]
    if not runs:
        return None
    weighted = [(r["telemetry"]["samples"], r["telemetry"]["device_util_mean_pct"]) for r in runs
                if r["telemetry"].get("device_util_mean_pct") is not None]
    at = best_run["telemetry"] if best_run is not None and any(r is best_run for r in runs) else None
    return {
        "samples": sum(r["telemetry"]["samples"] for r in runs),
        "device_util_mean_pct": (sum(n * v for n, v in weighted) / sum(n for n, _ in weighted)) if weighted else None,
        **{name: max((r["telemetry"][name] for r in runs if r["telemetry"].get(name) is not None), default=None)
           for name in DEVICE_PEAKS},
        "at_max_load": None if at is None else {
            name: at.get(name) for name in ("device_util_mean_pct", "device_mem_max_pct", "kv_cache_usage_max")},
    }


def measured(candidate_json: dict, label: str, cards: int, reason: str, document: dict,
             deploy_s: Optional[float], rate: Optional[float] = None) -> dict:
    """The record of one measured candidate: goodput (at the highest load that met the SLOs), per card, the knee,
    time to serve, why it was tried, what bound it, its devices' telemetry. With a `rate` (`--traffic rate=`), it
    meets the SLOs only when it met them at that rate or above."""
    found = document.get("search") or {}
    key = "parallel_num" if document.get("mode") == "static" else "request_rate"
    best = found.get("max_meeting")
    run = next((r for r in document.get("runs", []) if best is not None and r.get(key) == best), None)
    slo = (run or {}).get("slo") or {}
    goodput = slo.get("goodput_request_throughput", 0.0) if run else 0.0
    return {
        "label": label, "values": candidate_json, "cards": cards, "reason": reason, "status": "measured",
        "meets_slo": best is not None and (rate is None or best >= rate), "rate": rate, "max_load": best,
        "by": found.get("by"),
        "goodput_rps": goodput, "goodput_tokens_s": slo.get("goodput_output_token_throughput", 0.0) if run else 0.0,
        "goodput_per_card": goodput / cards if cards else 0.0,
        "knee": document.get("knee"), "binding": binding(document, candidate_json.get("model.max_num_seqs")),
        "stopped": found.get("stopped"),
        "time_to_serve_s": deploy_s, "telemetry": telemetry(document, run), "error": None,
    }


def failed(candidate_json: dict, label: str, cards: int, reason: str, error: str, deploy_s=None) -> dict:
    """A candidate that did not start (or whose bench failed): recorded with its error; the tune goes on."""
    return {"label": label, "values": candidate_json, "cards": cards, "reason": reason, "status": "failed",
            "meets_slo": False, "max_load": None, "by": None, "goodput_rps": 0.0, "goodput_tokens_s": 0.0,
            "goodput_per_card": 0.0, "knee": None, "binding": "unknown", "stopped": None,
            "time_to_serve_s": deploy_s, "telemetry": None, "error": error}


def reusable(record, retry_failed: bool = False) -> Optional[dict]:
    """An earlier run's record (parsed JSON) that stands for this run, or None to measure again: a measured one, and
    a failed one unless `--retry-failed` (a failure may have been transient, a host down); anything else (a file
    cut short, an unknown status) is measured again."""
    if not isinstance(record, dict):
        return None
    if record.get("status") == "measured" or (record.get("status") == "failed" and not retry_failed):
        return record
    return None


def rank(records: list[dict]) -> list[dict]:
    """Best first: measured and meeting the SLOs, then goodput per card, then fewer cards, then the label; with a
    rate to serve (`--traffic rate=`: every record of a tune has the same), fewer cards before goodput per card."""
    return sorted(records, key=lambda r: (r["status"] != "measured", not r["meets_slo"],
                                          r["cards"] if r.get("rate") else 0, -r["goodput_per_card"], r["cards"],
                                          r["label"]))
