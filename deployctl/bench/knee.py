"""The knee explained (pure): the first run where the SLOs break (or, without SLOs, where latency bends), and its
likely cause read from that run's telemetry, with the numbers behind it."""

from __future__ import annotations

from typing import Optional

BEND = 1.5  # a latency this many times the previous run's (and the lightest run's) is a bend
KV_FULL = 0.95
FLAT = 0.10  # device utilisation that moved less than this (relative) while the load grew is flat
LOAD_GREW = 1.5


def _key(document: dict) -> str:
    return "parallel_num" if document["mode"] == "static" else "request_rate"


def knee_run(runs: list[dict]) -> Optional[int]:
    """Index (in load order) of the first run that missed its SLOs; else of the first whose TTFT p99 or TPOT p50
    bent upwards."""
    if any("slo" in r for r in runs):
        return next((i for i, r in enumerate(runs) if "slo" in r and not r["slo"]["met"]), None)
    for i in range(1, len(runs)):
        for metric, stat in (("ttft_ms", "p99"), ("tpot_ms", "p50")):
            now, before, first = runs[i][metric][stat], runs[i - 1][metric][stat], runs[0][metric][stat]
            if now is not None and before and first and now > BEND * before and now > BEND * first:
                return i
    return None


def explain_knee(document: dict) -> Optional[dict]:
    """{"load", "cause", "explanation", "numbers"} for the knee, or None when latency never bent."""
    key = _key(document)
    runs = sorted(document["runs"], key=lambda r: r[key])
    index = knee_run(runs)
    if index is None:
        return None
    run = runs[index]
    load = run[key]
    telemetry = run.get("telemetry")
    if not telemetry or not telemetry.get("samples"):
        return {"load": load, "cause": "unknown", "numbers": {},
                "explanation": f"latency bends at {key} {load:g}; no telemetry to say why (bench a spec, not a URL, "
                               "to sample the hosts' NPUs and engines)"}
    previous = runs[index - 1].get("telemetry") if index else None
    for cause in (_kv_cache_full, _one_saturated, _devices_flat):
        found = cause(load, key, telemetry, previous, runs[index - 1][key] if index else None)
        if found is not None:
            return found
    numbers = {k: telemetry.get(k) for k in ("kv_cache_usage_max", "preemptions", "waiting_max",
                                              "device_util_mean_pct")}
    return {"load": load, "cause": "unclear", "numbers": numbers,
            "explanation": f"latency bends at {key} {load:g}, but the KV cache is not full, the engines are "
                           f"evenly loaded and the devices are busier than before: look at the engines' logs"}


def _kv_cache_full(load, key, telemetry, previous, previous_load) -> Optional[dict]:
    usage, preempted, waiting = telemetry.get("kv_cache_usage_max"), telemetry.get("preemptions") or 0, \
        telemetry.get("waiting_max") or 0
    if usage is None or usage < KV_FULL or not (preempted > 0 or waiting > 0):
        return None
    return {"load": load, "cause": "kv_cache_full",
            "numbers": {"kv_cache_usage_max": usage, "preemptions": preempted, "waiting_max": waiting},
            "explanation": f"at {key} {load:g} the KV cache is full ({100 * usage:.0f} %), {preempted:g} "
                           f"preemption(s), up to {waiting:g} request(s) waiting: new requests wait for KV blocks "
                           "and preempted ones are recomputed, so TTFT and TPOT climb. More KV room: more instances "
                           "(or decode instances), a lower max_num_seqs, a shorter max_model_len, or a higher "
                           "gpu-memory-utilization"}


def _one_saturated(load, key, telemetry, previous, previous_load) -> Optional[dict]:
    engines = telemetry.get("engines") or {}
    running = {name: e["running_max"] for name, e in engines.items() if e.get("running_max") is not None}
    if len(running) < 2:
        return None
    busiest = max(running, key=running.get)
    others = [v for name, v in running.items() if name != busiest]
    if running[busiest] <= 0 or max(others) > running[busiest] / 2:
        return None
    return {"load": load, "cause": "one_instance_saturated",
            "numbers": {"running_max": running},
            "explanation": f"at {key} {load:g} {busiest} runs up to {running[busiest]:g} request(s) while the "
                           f"others run at most {max(others):g}: the load is not spread (the scheduler's or "
                           "proxy's choice, or a slower instance), so one instance sets the latency"}


def _devices_flat(load, key, telemetry, previous, previous_load) -> Optional[dict]:
    now = telemetry.get("device_util_mean_pct")
    before = previous.get("device_util_mean_pct") if previous else None
    if now is None or before is None or not previous_load or load < LOAD_GREW * previous_load:
        return None
    if abs(now - before) > FLAT * max(before, 1.0):
        return None
    return {"load": load, "cause": "devices_flat",
            "numbers": {"device_util_mean_pct": {"before": before, "now": now}, "load": {"before": previous_load,
                                                                                        "now": load}},
            "explanation": f"device utilisation stayed at {before:.0f} % -> {now:.0f} % while {key} grew from "
                           f"{previous_load:g} to {load:g}: the NPUs are not the limit — the client, the network "
                           "or the scheduler/proxy in front is"}
