"""Two real vLLM engines behind the real vllm-router, one deployment (each start of the engine costs a minute
here): first the monitoring pack under a real Prometheus scraping them (every target up, every dashboard panel's
query returns series from vLLM's own metrics, idle engines fire nothing, and a real hang — the engine core
SIGSTOPped while a request streams — fires DeployctlServerHung for that engine alone); then a drain rollout under
steady streaming load: no request fails, and the load spans the whole update by construction (tests/e2e/load.py);
`recreate` is the control that fails requests. What the stand-in stood for here (vLLM's /metrics read while
draining, its stream ends, its stop, its gauges while hung) is vLLM's own."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.load import SteadyLoad
from tests.e2e.test_monitor import WAIT_S, Monitoring, check_pack_serves, monitor_key, post
from tests.monitor.conftest import prometheus_tools  # noqa: F401 (the fixture)
from tests.monitor.prometheus import wait_until
from tests.ports import free_port
from tests.real_engine.conftest import HOST, real_spec, stop_engine_core
from tests.real_engine.monitoring import BOUND_S, evidence, firing_hang, hang_rule, hang_with_a_request_held

pytestmark = pytest.mark.real_engine

NAME = "re-roll"
PORTS = (8610, 8611)
FRONT = 8612
URL = f"http://10.200.0.11:{FRONT}"
WORKERS = (f"{NAME}-mixed-0", f"{NAME}-mixed-1")
HUNG = WORKERS[0]  # the server on PORTS[0]
# Requests of 64 tokens take most of a second on the tiny model on 2 cores, so each drained server still holds
# requests when it is taken out of the router.
TOKENS = 64
# The image's vLLM: with it deployctl renders --shutdown-timeout (vLLM >= 0.18), so a request the router handed a
# server just before its removal, not yet counted in vLLM's gauges when the drain read them, finishes on SIGTERM;
# without it vLLM aborts at SIGTERM ("mode=abort timeout=0s" in the old server's log) and such a request failed
# (3 of 960 in one benchmarks/rollout.py real-drain run here).
VERSION = "0.32.0"


def update_under_load(bed, deployctl, seqs: int, strategy: str) -> tuple[dict, dict, dict, dict]:
    """`up` with max_num_seqs `seqs` while the load streams through the router: (load summary, up's document,
    containers before, after)."""
    path = deployctl.write(real_spec(bed, NAME, PORTS, max_num_seqs=seqs, front_port=FRONT, strategy=strategy,
                                     server_version=VERSION),
                           name=f"{NAME}.yaml")
    before = container_ids(bed, HOST, NAME)
    with SteadyLoad(URL, rate=2.0, tokens=TOKENS) as load:
        began = time.monotonic()
        code, doc = deployctl.json("up", path, "--yes", "--drain-timeout", "60")
        ended = time.monotonic()
    run = load.summary(began, ended)
    assert code == 0, deployctl.failed
    assert run["during"] > 0, run
    return run, doc, before, container_ids(bed, HOST, NAME)


def test_the_pack_sees_real_engines_and_a_real_hang_then_a_drain_rollout_drops_no_request_and_recreate_does(
        real_bed, deployctl, prometheus_tools, tmp_path):  # noqa: F811
    bed = real_bed
    pack, blackbox_port = tmp_path / "pack", free_port()
    path = deployctl.write(real_spec(bed, NAME, PORTS, front_port=FRONT, strategy="drain", server_version=VERSION,
                                     extra=monitor_key(pack, blackbox_port)), name=f"{NAME}.yaml")
    monitoring, stopped = None, ""
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0 and doc["endpoint"] == URL, deployctl.failed

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
        held, stopped = hang_with_a_request_held(bed, prometheus, HUNG, f"http://10.200.0.11:{PORTS[0]}")
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
        monitoring.stop()
        monitoring = None

        run, doc, before, after = update_under_load(bed, deployctl, 6, "drain")
        assert run["failed"] == 0, run
        assert all(after[w] != before[w] for w in WORKERS)
        assert after[f"{NAME}-router"] == before[f"{NAME}-router"]
        assert all(i["healthy"] for i in doc["instances"])

        run, doc, before, after = update_under_load(bed, deployctl, 4, "recreate")
        assert all(after[w] != before[w] for w in WORKERS)
        assert run["failed"] > 0, f"recreate stops both engines at once: requests in flight must fail: {run}"
    finally:
        if stopped:
            stop_engine_core(bed, HUNG, "CONT")
        if monitoring:
            monitoring.stop()
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}
