"""plan/front.py: the front of a spec, its backends, and the calls that change its list, for both kinds; the
vllm-router's container; `plan` shows it."""

from __future__ import annotations

import json

from deployctl.plan.containers import container_for, docker_run
from deployctl.plan.front import (
    PROXY, ROUTER, SCHEDULER, Backend, add_commands, backends, front_of, list_command, parse_list, reach,
    remove_commands,
)
from deployctl.plan.up import UpInputs, plan_up
from deployctl.spec.load import load_spec_text
from tests.plan.hostfacts import deployed
from tests.spec.test_front_rules import ASCENDCLOUD_PD, MIXED, ROUTER as ROUTER_FRONT, UPSTREAM_PD


def mixed():
    return load_spec_text(MIXED % (ROUTER_FRONT[:-1] + ", policy: round_robin}"))


def upstream_pd(image="quay.io/ascend/vllm-ascend:v0.13.0rc1"):
    return load_spec_text((UPSTREAM_PD % "proxy: {host: tb1, port: 8000}").replace(
        "quay.io/ascend/vllm-ascend:v0.13.0rc1", image))


def test_the_router_front_lists_every_mixed_server_and_changes_by_url():
    spec = mixed()
    front = front_of(spec)
    assert (front.kind, front.host, front.port, front.changes_list) == (ROUTER, "tb1", 8000, True)
    found = backends(spec, reach(spec))
    assert found == (Backend("mixed", "mix2-mixed-0", "10.200.0.11", 9001),
                     Backend("mixed", "mix2-mixed-1", "10.200.0.11", 9002))
    (remove,) = remove_commands(front, found[1:])
    assert remove.argv[-1] == "http://127.0.0.1:8000/remove_worker?url=http%3A%2F%2F10.200.0.11%3A9002"
    assert remove.argv[:2] == ("curl", "--silent") and "POST" in remove.argv
    (add,) = add_commands(front, found[1:])
    assert add.argv[-1].endswith("/add_worker?url=http%3A%2F%2F10.200.0.11%3A9002")
    assert list_command(front).argv[-1] == "http://127.0.0.1:8000/list_workers"
    assert parse_list(front.kind, '{"urls": ["http://10.200.0.11:9001"]}') == {"10.200.0.11:9001"}


def test_the_proxy_front_changes_by_role_with_one_call_per_role():
    spec = upstream_pd()
    front = front_of(spec)
    assert (front.kind, front.changes_list) == (PROXY, True)
    found = backends(spec, {"tb1": "10.200.0.11"})
    assert [(b.role, b.key) for b in found] == [("prefill", "10.200.0.11:9100"), ("prefill", "10.200.0.11:9101"),
                                                ("decode", "10.200.0.11:9200"), ("decode", "10.200.0.11:9201")]
    calls = remove_commands(front, (found[0], found[2]))
    bodies = [json.loads(c.argv[c.argv.index("--data-binary") + 1]) for c in calls]
    assert bodies == [{"type": "prefill", "instances": ["10.200.0.11:9100"]},
                      {"type": "decode", "instances": ["10.200.0.11:9200"]}]
    assert {c.argv[-1] for c in calls} == {"http://127.0.0.1:8000/instances/remove"}
    assert add_commands(front, found[:1])[0].argv[-1] == "http://127.0.0.1:8000/instances/add"
    answer = '{"message": "", "current_prefill_instances": ["a:1"], "current_decode_instances": ["b:2"]}'
    assert parse_list(front.kind, answer) == {"a:1", "b:2"}


def test_a_proxy_before_0_13_and_the_ascendcloud_scheduler_cannot_change_their_list():
    old = front_of(upstream_pd("quay.io/ascend/vllm-ascend:v0.11.0"))
    assert not old.changes_list and "#5063" in old.why_fixed
    scheduler = front_of(load_spec_text(ASCENDCLOUD_PD.replace("  front: {kind: vllm-router, host: tb1, image: r}\n",
                                                               "")))
    assert scheduler.kind == SCHEDULER and not scheduler.changes_list and "NODE_PORTS" in scheduler.why_fixed
    try:
        remove_commands(scheduler, ())
    except ValueError as error:
        assert "cannot change its list" in str(error)
    else:
        raise AssertionError("a fixed front must refuse to plan a change")


def test_the_router_container_runs_the_router_with_its_real_flags_on_its_own_image():
    spec = mixed()
    argv = docker_run(container_for(spec, spec.front), "d")
    image = argv.index("vllm-router:0.1.17")
    assert argv[image - 2:image] == ("--entrypoint", "vllm-router") and "--device" not in argv
    # its metrics on all addresses, on a port no server of the spec binds (issue 39: 127.0.0.1:29000 by default)
    assert argv[image + 1:] == ("--host", "0.0.0.0", "--port", "8000", "--prometheus-host", "0.0.0.0",
                                "--prometheus-port", "19000", "--worker-urls", "http://10.200.0.11:9001",
                                "http://10.200.0.11:9002", "--policy", "round_robin")
    other = load_spec_text(MIXED % (ROUTER_FRONT[:-1] + ", metrics_port: 19500}"))
    assert docker_run(container_for(other, other.front), "d")[image + 7:image + 9] == ("--prometheus-port", "19500")


def test_plan_starts_the_router_after_the_workers_and_asks_it_for_an_answer():
    spec = mixed()
    plan = plan_up(spec, {"tb1": deployed(image_id="sha256:img")}, UpInputs())
    names = [stage.name for stage in plan.stages]
    assert names.index("workers") < names.index("router") < names.index("answers")
    (router,) = [s for s in plan.steps if s.stage == "router"]
    assert router.container == "mix2-router" and router.health.path == "/liveness"
    (answers,) = [s for s in plan.steps if s.stage == "answers"]
    assert [p.name for p in answers.actions[0].paths] == ["mix2-mixed-0", "mix2-mixed-1", "mix2-router"]
    assert [s.container for s in plan.steps if s.stage == "verify"] == ["mix2-router"]
