"""The monitoring pack under a real Prometheus scraping real vLLM engines (and the real vllm-router): every target up,
every dashboard panel's query returns series from vLLM's own metrics, idle engines fire nothing, and a real hang (the
engine core SIGSTOPped while a request streams) fires DeployctlServerHung for that engine alone."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.load import HeldRequest
from tests.e2e.test_monitor import WAIT_S, Monitoring, check_pack_serves, monitor_key, post
from tests.monitor.conftest import prometheus_tools  # noqa: F401 (the fixture)
from tests.monitor.prometheus import wait_until
from tests.ports import free_port
from tests.real_engine.conftest import real_spec
from tests.real_engine.conftest import stop_engine_core

pytestmark = pytest.mark.real_engine

NAME = "re-mon"
PORTS = (8640, 8641)
FRONT = 8642
HUNG = f"{NAME}-mixed-0"  # the server on PORTS[0]
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


def held_now(prometheus, since: float) -> list:
    """Requests running or waiting on the hung server as scraped after `since` (Unix time); [] before that scrape."""
    series = f'vllm:num_requests_running{{instance="{HUNG}"}} + vllm:num_requests_waiting{{instance="{HUNG}"}}'
    return [float(s["value"][1]) for s in prometheus.query(
        f'({series}) and (timestamp(vllm:num_requests_running{{instance="{HUNG}"}}) > {since})')]


def hang_with_a_request_held(bed, prometheus, attempts: int = 3) -> tuple[HeldRequest, str]:
    """A streamed request in flight, then the engine core SIGSTOPped: (the request, the stopped pids). The API
    server's gauges and token counter move only when an output of the core arrives (vllm/v1/engine/async_llm.py
    output_handler passes each batch's SchedulerStats to vllm/v1/metrics/loggers.py PrometheusStatLogger.record),
    so a stopped core leaves them as its last batch set them. A quiet machine may finish all the request's tokens
    before the stop reaches the core (the gauges then froze at 0 held): that try resumes it and sends another."""
    for _ in range(attempts):
        held = HeldRequest(f"http://10.200.0.11:{PORTS[0]}", HELD_TOKENS, ignore_eos=True).__enter__()
        stopped = stop_engine_core(bed, HUNG)
        assert stopped, "no VLLM::EngineCore process in the container"
        since = time.time()
        if wait_until(lambda: held_now(prometheus, since), "a scrape of the stopped engine", WAIT_S)[0] > 0:
            return held, stopped
        stop_engine_core(bed, HUNG, "CONT")
        held.__exit__(None, None, None)
    raise AssertionError(f"every one of {attempts} requests finished before the engine core stopped")


def firing_hang(prometheus) -> list:
    return [a["labels"]["instance"] for a in prometheus.alerts()
            if a["labels"]["alertname"] == "DeployctlServerHung" and a["state"] == "firing"]


def test_every_target_is_up_every_panel_has_series_and_a_real_hang_fires_the_hang_alert(
        real_bed, deployctl, prometheus_tools, tmp_path):  # noqa: F811
    bed = real_bed
    pack, blackbox_port = tmp_path / "pack", free_port()
    path = deployctl.write(real_spec(bed, NAME, PORTS, front_port=FRONT, extra=monitor_key(pack, blackbox_port)),
                           name=f"{NAME}.yaml")
    monitoring, stopped = None, ""
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        monitoring = Monitoring(pack, blackbox_port)
        prometheus = monitoring.prometheus
        for _ in range(4):  # through the router: both engines' histograms get observations
            post("10.200.0.11", FRONT, {"model": "tiny", "prompt": "hello monitor", "max_tokens": 8})
        check_pack_serves(pack, prometheus, {"deployctl-servers": 2, "deployctl-front": 1,
                                             "deployctl-router": 1})
        # idle real engines fire nothing (rules pending on a just-started Prometheus settle once all is scraped)
        wait_until(lambda: prometheus.alerts() == [], "no alert pending on idle engines", WAIT_S)

        # the real hang: a request streaming from the engine, then its core stopped mid-generation
        rule = hang_rule(prometheus)
        held, stopped = hang_with_a_request_held(bed, prometheus)
        try:
            hung = wait_until(lambda: firing_hang(prometheus), "DeployctlServerHung firing",
                              rule["duration"] + BOUND_S, every=0.5)  # the API gives `for:` in seconds
        except AssertionError as error:
            raise AssertionError(f"{error}\n{rule['query']}\n{evidence(prometheus, HUNG)}") from None
        assert hung == [HUNG]
        stop_engine_core(bed, HUNG, "CONT")
        stopped = ""
        held.__exit__(None, None, None)
        assert held.cut == "" and held.finish_reason == "length", (held.cut, held.finish_reason)
    finally:
        if stopped:
            stop_engine_core(bed, HUNG, "CONT")
        if monitoring:
            monitoring.stop()
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
