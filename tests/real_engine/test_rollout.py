"""A drain rollout of two real vLLM engines behind the real vllm-router under steady streaming load: no request
fails, and the load spans the whole update by construction (tests/e2e/load.py); `recreate` is the control that
fails requests. What the stand-in stood for here (vLLM's /metrics read while draining, its stream ends, its stop)
is vLLM's own."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.load import SteadyLoad
from tests.real_engine.conftest import HOST, real_spec

pytestmark = pytest.mark.real_engine

NAME = "re-roll"
PORTS = (8610, 8611)
FRONT = 8612
URL = f"http://10.200.0.11:{FRONT}"
WORKERS = (f"{NAME}-mixed-0", f"{NAME}-mixed-1")
# Requests of 64 tokens take most of a second on the tiny model on 2 cores, so each drained server still holds
# requests when it is taken out of the router.
TOKENS = 64


def update_under_load(bed, deployctl, seqs: int, strategy: str) -> tuple[dict, dict, dict, dict]:
    """`up` with max_num_seqs `seqs` while the load streams through the router: (load summary, up's document,
    containers before, after)."""
    path = deployctl.write(real_spec(bed, NAME, PORTS, max_num_seqs=seqs, front_port=FRONT, strategy=strategy),
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


def test_a_drain_rollout_of_real_engines_drops_no_request_and_recreate_does(real_bed, deployctl):
    bed = real_bed
    path = deployctl.write(real_spec(bed, NAME, PORTS, front_port=FRONT, strategy="drain"), name=f"{NAME}.yaml")
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0 and doc["endpoint"] == URL, deployctl.failed

        run, doc, before, after = update_under_load(bed, deployctl, 6, "drain")
        assert run["failed"] == 0, run
        assert all(after[w] != before[w] for w in WORKERS)
        assert after[f"{NAME}-router"] == before[f"{NAME}-router"]
        assert all(i["healthy"] for i in doc["instances"])

        run, doc, before, after = update_under_load(bed, deployctl, 4, "recreate")
        assert all(after[w] != before[w] for w in WORKERS)
        assert run["failed"] > 0, f"recreate stops both engines at once: requests in flight must fail: {run}"
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}
