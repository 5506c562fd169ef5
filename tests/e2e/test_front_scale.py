"""A changed list of instances is put to the running front (issue 31): on the test bed, a mixed deployment behind
the real vllm-router scales from 2 instances to 3 and back while a steady streaming load runs through the router:
no request fails and the router container is the same one, never restarted (its list is no part of its digest);
killed, the router is started again by watch and put the spec's list, not its argv's."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import container_ids, http_json
from tests.e2e.test_rollout import up_under_load
from tests.e2e.test_watch import watch_once
from tests.testbed import router_image

SPEC = """image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 8, max_num_batched_tokens: 2048}
env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: 0.5}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb4, port: 8600, image: "%s", policy: round_robin}
  instances:
    - {host: tb4, devices: [0], port: 8601}
    - {host: tb4, devices: [1], port: 8602}
"""
THIRD = "    - {host: tb4, devices: [2], port: 8603}\n"
URL = "http://10.200.0.14:8600"


def started(bed) -> str:
    """The router container's ID, start time and restart count: the same while it was never restarted."""
    return bed.docker_on("tb4", "inspect", "--format", "{{.Id}} {{.State.StartedAt}} {{.RestartCount}}",
                         "e2e-scale-router").stdout.strip()


@pytest.mark.testbed
def test_scaling_behind_the_router_changes_its_list_while_it_serves_and_drops_no_request(bed, deployctl):
    if router_image.IMAGE not in bed.docker_on("tb4", "images", "--format", "{{.Repository}}:{{.Tag}}").stdout:
        pytest.fail(f"the bed has no {router_image.IMAGE} (pip install vllm-router=={router_image.VERSION} failed)")
    two = bed.spec_yaml("e2e-scale", SPEC % router_image.IMAGE, hosts_used=["tb4"])
    path = deployctl.write(two)
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["endpoint"] == URL, doc
        router = started(bed)

        path = deployctl.write(bed.spec_yaml("e2e-scale", (SPEC % router_image.IMAGE) + THIRD, hosts_used=["tb4"]))
        code, plan = deployctl.json("plan", path, "--skip", "weights")
        steps = {(e["stage"], e.get("container")): e for e in plan["steps"]}
        assert steps[("router", "e2e-scale-router")]["action"] == "keep", plan
        run, _ = up_under_load(deployctl, path, URL, "--drain-timeout", "30")
        assert run["failed"] == 0 , run
        assert started(bed) == router
        three = ["http://10.200.0.14:8601", "http://10.200.0.14:8602", "http://10.200.0.14:8603"]
        assert sorted(http_json(bed, "tb4", 8600, "/list_workers")["urls"]) == three

        # its argv still lists the first `up`'s two: killed and started again by watch, it is put the spec's three
        bed.docker_on("tb4", "kill", "e2e-scale-router")
        actions = [line for line in watch_once(deployctl, path) if line["type"] == "action"]
        assert [(a["containers"], a["result"]) for a in actions] == [
            (["e2e-scale-router"], "restarting"), (["e2e-scale-router"], "ok")], actions
        assert sorted(http_json(bed, "tb4", 8600, "/list_workers")["urls"]) == three
        router = started(bed)

        path = deployctl.write(two)
        run, _ = up_under_load(deployctl, path, URL, "--drain-timeout", "30")
        assert run["failed"] == 0 , run
        assert started(bed) == router
        assert sorted(http_json(bed, "tb4", 8600, "/list_workers")["urls"]) == [
            "http://10.200.0.14:8601", "http://10.200.0.14:8602"]
        assert set(container_ids(bed, "tb4", "e2e-scale")) == {"e2e-scale-router", "e2e-scale-mixed-0",
                                                                "e2e-scale-mixed-1"}
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0 and container_ids(bed, "tb4", "e2e-scale") == {}
