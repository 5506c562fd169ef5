"""The monitoring pack against real vLLM engines (and the real vllm-router) under a real Prometheus: what
tests/real_engine/test_rollout.py asks of Prometheus and of a hung engine."""

from __future__ import annotations

import json
import time

from tests.e2e.load import HeldRequest
from tests.e2e.test_monitor import WAIT_S
from tests.monitor.prometheus import wait_until
from tests.real_engine.conftest import stop_engine_core, throttled

# Past the rule's `for:`: the two scrapes that show the token counter flat, one evaluation, and slack for a loaded
# 2-core machine (Prometheus' evaluations and scrapes run late there)
BOUND_S = 30
HELD_TOKENS = 480  # the most max_model_len (512) leaves after the prompt: the longest a request streams


def hang_rule(prometheus) -> dict:
    return next(rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]
                if rule.get("name") == "DeployctlServerHung")


def evidence(prometheus, instance: str) -> str:
    """What Prometheus holds of the hung server over the last 3 minutes, for a failure's message."""
    found = {}
    for metric in ("up", "scrape_duration_seconds", "vllm:num_requests_running", "vllm:num_requests_waiting",
                   "vllm:generation_tokens_total"):
        found[metric] = [(s["metric"].get("engine"), s["values"][-40:])
                         for s in prometheus.query(f'{metric}{{instance="{instance}"}}[3m]')]
    found["alerts"] = [(a["labels"], a["state"], a["activeAt"]) for a in prometheus.alerts()]
    return json.dumps(found, indent=1)


def held_now(prometheus, hung: str, since: float) -> list:
    """Requests running or waiting on the hung server as scraped after `since` (Unix time); [] before that scrape."""
    series = f'vllm:num_requests_running{{instance="{hung}"}} + vllm:num_requests_waiting{{instance="{hung}"}}'
    return [float(s["value"][1]) for s in prometheus.query(
        f'({series}) and (timestamp(vllm:num_requests_running{{instance="{hung}"}}) > {since})')]


def hang_with_a_request_held(bed, prometheus, hung: str, url: str, attempts: int = 3) -> tuple[HeldRequest, str]:
    """A streamed request in flight, then the engine core SIGSTOPped: (the request, the stopped pids). The API
    server's gauges and token counter move only when an output of the core arrives (vllm/v1/engine/async_llm.py
    output_handler passes each batch's SchedulerStats to vllm/v1/metrics/loggers.py PrometheusStatLogger.record),
    so a stopped core leaves them as its last batch set them. At full speed the tiny model may generate all 480
    tokens before the stop reaches the core (CI saw it three tries in a row, the gauges frozen at 0 held), so the
    container is throttled from the request to the stop; a try that still lost the race resumes and sends again."""
    for _ in range(attempts):
        with throttled(bed, hung):
            held = HeldRequest(url, HELD_TOKENS, ignore_eos=True).__enter__()
            stopped = stop_engine_core(bed, hung)
        assert stopped, "no VLLM::EngineCore process in the container"
        since = time.time()
        if wait_until(lambda: held_now(prometheus, hung, since), "a scrape of the stopped engine", WAIT_S)[0] > 0:
            return held, stopped
        stop_engine_core(bed, hung, "CONT")
        held.__exit__(None, None, None)
    raise AssertionError(f"every one of {attempts} requests finished before the engine core stopped")


def firing_hang(prometheus) -> list:
    return [a["labels"]["instance"] for a in prometheus.alerts()
            if a["labels"]["alertname"] == "DeployctlServerHung" and a["state"] == "firing"]
