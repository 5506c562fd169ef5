"""SGLang's router as a front (deployctl/fronts/sglang_router.py, issue 43): its container's argv, what the rules
refuse, its list as the real 0.3.2 answers it, the steps a drain rollout puts to it. The bed runs the real router
(tests/e2e/test_gpu.py); its worker API was read from the wheel on loopback (the answers below are its own)."""

from __future__ import annotations

import pytest

from deployctl.fronts import front_kind
from deployctl.fronts.base import Backend
from deployctl.fronts.sglang_router import ADD_SCRIPT, REMOVE_SCRIPT, SGLANG_ROUTER
from deployctl.plan.containers import container_for, docker_run
from deployctl.plan.front import drain_step, front_of, list_command, parse_list, route_step
from tests.servers.sglang.test_flavour import BASE, errors_of, spec

FRONT = "  front: {kind: sglang-router, host: tb1, port: 8000, image: 'sglang-router:0.3.2', policy: round_robin}\n"
TWO = (BASE.replace("  mode: mixed\n", "  mode: mixed\n" + FRONT)
       + "    - {host: tb1, devices: [1], port: 30001}\n")
# GET /workers of sglang-router 0.3.2 with two regular workers (sgl-model-gateway src/core/worker_service.rs
# ListWorkersResult), as it answered on loopback
WORKERS = ('{"workers":[{"id":"9bbb9c84-d08d-4864-ba4a-9851d5228c61","url":"http://10.200.0.11:30000","model_id":'
           '"unknown","priority":50,"cost":1.0,"worker_type":"regular","is_healthy":true,"load":0,"connection_mode":'
           '"HTTP","disable_health_check":false},{"id":"398e2841-caf3-4568-84eb-e6d15d969ab6","url":'
           '"http://10.200.0.11:30001","model_id":"unknown","priority":50,"cost":1.0,"worker_type":"regular",'
           '"is_healthy":true,"load":0,"connection_mode":"HTTP","disable_health_check":false}],"total":2,'
           '"stats":{"prefill_count":0,"decode_count":0,"regular_count":2}}')


def test_the_router_runs_launch_router_with_the_workers_and_its_metrics_off_its_29000_default():
    s = spec(TWO)
    assert s.front.name == "tiny-sglang-router" and s.front.role == SGLANG_ROUTER
    container = container_for(s, s.front)
    assert container.image == "sglang-router:0.3.2" and container.devices == () and container.gpus is None
    argv = docker_run(container, "d")
    at = argv.index("--entrypoint")
    assert argv[at + 1] == "python3"
    assert list(argv[argv.index("sglang-router:0.3.2") + 1:]) == [
        "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", "8000", "--prometheus-host", "0.0.0.0",
        "--prometheus-port", "19000", "--worker-urls", "http://10.200.0.11:30000", "http://10.200.0.11:30001",
        "--policy", "round_robin"]
    # the list is no part of its identity: a spec that adds a server keeps the router and puts the server to it
    assert "--worker-urls" not in container.identity_command


@pytest.mark.parametrize("change, expected", [
    (("image: 'sglang-router:0.3.2', ", ""), "s.yaml:14:10: topology.front: kind sglang-router needs front.image"),
    (("policy: round_robin", "policy: consistent_hash"),
     "s.yaml:14:93: topology.front.policy: sglang-router 0.3.2 has no policy 'consistent_hash' (its --policy takes "
     "random, round_robin, cache_aware, power_of_two, manual)"),
    (("  front: {kind: sglang-router, host: tb1, port: 8000", "  front: {kind: sglang-router, host: tb1, port: 30001"),
     "port 30001"),
])
def test_what_the_router_cannot_take_is_refused_at_its_key(change, expected):
    errors = errors_of(TWO.replace(*change))
    assert [e for e in errors if expected in e], errors


def test_server_sglang_with_the_router_is_valid_and_drains_through_it():
    assert errors_of(TWO) == []
    front = front_of(spec(TWO))
    assert front.changes_list and front_kind(front.kind).drains


def test_its_list_is_read_from_get_workers_as_0_3_2_answers_it():
    front = front_of(spec(TWO))
    assert list_command(front).argv[-1] == "http://127.0.0.1:8000/workers"
    assert parse_list(front.kind, WORKERS) == {"10.200.0.11:30000", "10.200.0.11:30001"}
    assert front_kind(SGLANG_ROUTER).parse_roles(WORKERS) == {"10.200.0.11:30000": "mixed",
                                                              "10.200.0.11:30001": "mixed"}
    with pytest.raises(KeyError):  # vllm-router's answer is not its
        parse_list(front.kind, '{"urls": ["http://10.200.0.11:30000"]}')


def test_a_drain_takes_a_worker_out_by_its_id_and_a_route_puts_it_back_each_awaited():
    front = front_of(spec(TWO))
    backend = Backend("mixed", "tiny-sglang-mixed-1", "10.200.0.11", 30001)
    drain = drain_step(front, (backend,), "roll", 30.0)
    (remove,) = drain.commands
    assert remove.argv == ("sh", "-c", REMOVE_SCRIPT, "sh", "8000", "30", "http://10.200.0.11:30001")
    assert [a.servers for a in drain.actions] == [(("tiny-sglang-mixed-1", "http://10.200.0.11:30001/metrics"),)]
    (put_back,) = drain.late_undo
    assert put_back.argv[2] == ADD_SCRIPT and put_back.argv[-2] == "http://10.200.0.11:30001"
    route = route_step(front, (backend,), "roll", 30.0)
    assert route.commands[0].argv == ("sh", "-c", ADD_SCRIPT, "sh", "8000", "30", "http://10.200.0.11:30001",
                                      '{"url":"http://10.200.0.11:30001"}')
    assert route.actions[0].keys == ("10.200.0.11:30001",)
    # DELETE takes the id its list gives (worker_service.rs parse_worker_id), waited for until unlisted
    assert 'request DELETE "$w/$id"' in REMOVE_SCRIPT and "still lists" in REMOVE_SCRIPT
    assert '"is_healthy":true' in ADD_SCRIPT


def test_export_refuses_the_router_at_topology_front_with_the_way_out():
    from deployctl.export.refusals import _front

    (problem,) = _front(spec(TWO))
    assert problem.path == ("topology", "front") and "sglang-router front (topology.front) is not exported" in \
        problem.message and problem.hint == "remove topology.front from a copy of the spec to export it"
