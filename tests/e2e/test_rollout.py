"""Drain-and-replace on the test bed (issue 31): a steady streaming load through the front (the real vllm-router,
tests/testbed/router_image.py), from before `up` applies a changed max_num_seqs until after it returned: no request
fails, every server is replaced, the router is not; the same run with `rollout: recreate` drops requests."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.load import HeldRequest, SteadyLoad
from tests.testbed import router_image

# Requests that last about 1.6 s (16 tokens, 100 ms apart: the stand-in's STANDIN_TPOT_MS), so that each drained
# server has requests in flight when it is taken out of the front.
MIXED = """image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: %d, max_num_batched_tokens: 2048}
env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: 0.5}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb1, port: 8300, image: "%s", policy: round_robin}
  instances:
    - {host: tb1, devices: [0], port: 8301}
    - {host: tb1, devices: [1], port: 8302}
rollout: {strategy: %s}
"""


def up_under_load(deployctl, path, url: str, *flags: str) -> tuple[dict, dict]:
    """`up --yes` of `path` while a steady load streams through `url` from before `up` begins until it has returned:
    (the load's summary, with `during` the requests sent while `up` ran; up's document)."""
    with SteadyLoad(url) as load:
        began = time.monotonic()
        code, doc = deployctl.json("up", path, "--yes", "--skip", "weights", *flags)
        ended = time.monotonic()
    run = load.summary(began, ended)
    assert code == 0, doc
    assert run["during"] > 0, run
    return run, doc


def update_under_load(bed, deployctl, strategy: str, seqs: int) -> tuple[dict, dict, dict, dict]:
    """`up` the spec with max_num_seqs `seqs` under load through the front: (the load's summary, up's document,
    containers before, after)."""
    path = deployctl.write(bed.spec_yaml("e2e-roll", MIXED % (seqs, router_image.IMAGE, strategy),
                                         hosts_used=["tb1"]))
    before = container_ids(bed, "tb1", "e2e-roll")
    run, doc = up_under_load(deployctl, path, "http://10.200.0.11:8300", "--drain-timeout", "30")
    return run, doc, before, container_ids(bed, "tb1", "e2e-roll")


@pytest.mark.testbed
def test_a_drain_rollout_through_the_real_router_drops_no_request_and_recreate_does(bed, deployctl):
    if router_image.IMAGE not in bed.docker_on("tb1", "images", "--format", "{{.Repository}}:{{.Tag}}").stdout:
        pytest.fail(f"the bed has no {router_image.IMAGE} (pip install vllm-router=={router_image.VERSION} failed)")
    path = deployctl.write(bed.spec_yaml("e2e-roll", MIXED % (8, router_image.IMAGE, "drain"), hosts_used=["tb1"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["endpoint"] == "http://10.200.0.11:8300", doc
        run, doc, before, after = update_under_load(bed, deployctl, "drain", 16)
        assert run["failed"] == 0, run
        workers = ("e2e-roll-mixed-0", "e2e-roll-mixed-1")
        assert all(after[w] != before[w] for w in workers) and after["e2e-roll-router"] == before["e2e-roll-router"]
        assert all(i["healthy"] for i in doc["instances"])

        run, doc, before, after = update_under_load(bed, deployctl, "recreate", 24)
        assert all(after[w] != before[w] for w in workers)
        assert run["failed"] > 0, "recreate stops both servers at once: requests in flight must fail"
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0 and container_ids(bed, "tb1", "e2e-roll") == {}


ONE = """image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: %d, max_num_batched_tokens: 2048}
env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: 0.5}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb2, port: 8400, image: "%s"}
  instances:
    - {host: tb2, devices: [0], port: 8401}
rollout: {max_surge: 1}
"""


@pytest.mark.testbed
def test_a_single_instance_with_a_free_card_updates_through_surge_with_no_failed_request(bed, deployctl):
    path = deployctl.write(bed.spec_yaml("e2e-surge", ONE % (8, router_image.IMAGE), hosts_used=["tb2"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        path = deployctl.write(bed.spec_yaml("e2e-surge", ONE % (16, router_image.IMAGE), hosts_used=["tb2"]))
        code, plan = deployctl.json("plan", path, "--skip", "weights")
        assert plan["rollout"]["waves"][0]["surge"][0].startswith("e2e-surge-mixed-0-surge on tb2 devices 1 ")
        before = container_ids(bed, "tb2", "e2e-surge")
        run, doc = up_under_load(deployctl, path, "http://10.200.0.12:8400")
        assert run["failed"] == 0, run
        after = container_ids(bed, "tb2", "e2e-surge")
        assert set(after) == {"e2e-surge-mixed-0", "e2e-surge-router"}  # the surge server is gone
        assert after["e2e-surge-mixed-0"] != before["e2e-surge-mixed-0"]
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0 and container_ids(bed, "tb2", "e2e-surge") == {}


PD = """server: vllm-ascend
image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: %d, max_num_batched_tokens: 2048}
env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: 0.5}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  front: {kind: proxy, host: tb3, port: 8450}
  prefill:
    - {hosts: [tb3], dp: 1, tp: 1, port: 9400, devices: [0]}
    - {hosts: [tb3], dp: 1, tp: 1, port: 9410, devices: [1]}
  decode:
    - {hosts: [tb3], dp: 1, tp: 1, port: 9500, devices: [2]}
    - {hosts: [tb3], dp: 1, tp: 1, port: 9510, devices: [3]}
rollout: {strategy: %s}
"""


@pytest.mark.testbed
def test_the_vllm_ascend_pd_shape_updates_through_its_proxy_with_no_failed_request(bed, deployctl):
    """Two prefill and two decode groups behind vllm-ascend's proxy (its /instances/add|remove, v0.13.0rc1 on):
    each wave takes a prefill and a decode group out, so the P:D ratio stays 1:1 and both roles keep serving."""
    path = deployctl.write(bed.spec_yaml("e2e-pdroll", PD % (8, "drain"), hosts_used=["tb3"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["endpoint"] == "http://10.200.0.13:8450", doc
        path = deployctl.write(bed.spec_yaml("e2e-pdroll", PD % (16, "drain"), hosts_used=["tb3"]))
        code, plan = deployctl.json("plan", path, "--skip", "weights")
        assert [w["units"] for w in plan["rollout"]["waves"]] == [["prefill0", "decode0"], ["prefill1", "decode1"]]
        before = container_ids(bed, "tb3", "e2e-pdroll")
        run, doc = up_under_load(deployctl, path, "http://10.200.0.13:8450")
        assert run["failed"] == 0, run
        after = container_ids(bed, "tb3", "e2e-pdroll")
        servers = [name for name in before if name != "e2e-pdroll-proxy"]
        assert len(servers) == 4 and all(after[s] != before[s] for s in servers)
        assert after["e2e-pdroll-proxy"] == before["e2e-pdroll-proxy"]

        path = deployctl.write(bed.spec_yaml("e2e-pdroll", PD % (24, "recreate"), hosts_used=["tb3"]))
        run, doc = up_under_load(deployctl, path, "http://10.200.0.13:8450")
        assert run["failed"] > 0, "recreate stops every server at once: requests must fail"
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0 and container_ids(bed, "tb3", "e2e-pdroll") == {}


@pytest.mark.testbed
def test_vllm_ascend_dp_groups_surge_whole_on_free_cards_with_no_failed_request(bed, deployctl):
    """The P/D shape on cards 0-3 of a host with 8: each wave first starts its prefill and its decode group again as
    new groups on free cards (their own engine ids, API, kv and rpc ports), puts them into the proxy, then drains
    and replaces the old groups, then drains and removes the surge groups."""
    surge = PD.replace("rollout: {strategy: %s}", "rollout: {strategy: %s, max_surge: 2}")
    path = deployctl.write(bed.spec_yaml("e2e-pdsurge", surge % (8, "drain"), hosts_used=["tb3"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        path = deployctl.write(bed.spec_yaml("e2e-pdsurge", surge % (16, "drain"), hosts_used=["tb3"]))
        code, plan = deployctl.json("plan", path, "--skip", "weights")
        assert [len(w.get("surge", ())) for w in plan["rollout"]["waves"]] == [2, 2], plan["rollout"]
        assert plan["rollout"]["waves"][0]["surge"][0].startswith("e2e-pdsurge-prefill0-r0-surge on tb3 devices 4 ")
        before = container_ids(bed, "tb3", "e2e-pdsurge")
        run, doc = up_under_load(deployctl, path, "http://10.200.0.13:8450")
        assert run["failed"] == 0, run
        after = container_ids(bed, "tb3", "e2e-pdsurge")
        assert set(after) == set(before)  # the surge groups are gone
        assert all(after[s] != before[s] for s in before if s != "e2e-pdsurge-proxy")
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0 and container_ids(bed, "tb3", "e2e-pdsurge") == {}


HELD = """image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 4096, max_num_seqs: %d, max_num_batched_tokens: 4096}
env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: 0.5}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb4, port: 8470, image: "%s"}
  instances:
    - {host: tb4, devices: [0], port: 8471}
rollout: {strategy: drain}
"""
# 4000 tokens 100 ms apart: the held request streams for 400 s, far past the 1 s drain deadline whenever up reaches
# its drain; it ends only when the drained server is stopped (docker stop --time 1).
HELD_TOKENS = 4000


@pytest.mark.testbed
def test_a_drain_whose_deadline_passes_with_a_request_in_flight_exits_4_and_a_rerun_converges(bed, deployctl):
    """README's exit 4: `up` deployed, but a drain's deadline passed with requests still in flight. The server's
    count is in `drain_left` and on stderr (even with --quiet); the request is cut by the graceful stop; the new
    server serves, and a re-run changes nothing."""
    path = deployctl.write(bed.spec_yaml("e2e-held", HELD % (8, router_image.IMAGE), hosts_used=["tb4"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        path = deployctl.write(bed.spec_yaml("e2e-held", HELD % (16, router_image.IMAGE), hosts_used=["tb4"]))
        before = container_ids(bed, "tb4", "e2e-held")
        with HeldRequest("http://10.200.0.14:8471", HELD_TOKENS) as held:
            code, out, err = deployctl("up", path, "--yes", "--skip", "weights", "--output", "json", "--quiet",
                                       "--drain-timeout", "1", "--shutdown-timeout", "1")
        doc = json.loads(out)
        assert code == 4, doc
        assert doc["drain_left"] == {"e2e-held-mixed-0": 1}, doc
        assert "drain deadline: wave 1: still in flight after 1 s, stopped gracefully: e2e-held-mixed-0: " \
               "1 request(s)" in err
        assert held.cut, "the held request was still streaming when up returned, or ended in full"
        after = container_ids(bed, "tb4", "e2e-held")
        assert after["e2e-held-mixed-0"] != before["e2e-held-mixed-0"] and all(i["healthy"] for i in doc["instances"])

        code, doc = deployctl.json("up", path, "--yes", "--skip", "weights")
        assert code == 0 and doc["changed"] is False and doc["drain_left"] == {}, doc
        assert container_ids(bed, "tb4", "e2e-held") == after
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0 and container_ids(bed, "tb4", "e2e-held") == {}
