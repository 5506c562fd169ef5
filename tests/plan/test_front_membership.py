"""plan/front.py membership: a changed list of servers is put to a front that changes its list while serving (its
identity does not hold the list), never by a new front: new servers go in once they serve, retired ones go out
and drain before they stop."""

from __future__ import annotations


from deployctl.facts.assemble import ProbeOutput, host_facts_from
from deployctl.plan.containers import container_for
from deployctl.plan.front import FRONT_LIST_KEY, front_list_probe, front_of, membership_stages
from deployctl.plan.probes import state_probes
from deployctl.plan.up import UpInputs, digest_of, plan_up
from deployctl.servers.vllm_ascend.upstream import HostNetwork
from deployctl.spec.load import load_spec_text
from tests.plan.hostfacts import deployed, running
from tests.plan.test_rollout import deployed_upstream
from tests.spec.test_front_rules import MIXED, ROUTER, UPSTREAM_PD

IMAGE = "sha256:img"
NETWORKS = {"tb1": HostNetwork("10.200.0.11", "eth0", 8)}
THIRD = "    - {host: tb1, devices: [2], port: 9003}\n"


def mixed(count=2):
    text = MIXED % ROUTER
    return load_spec_text(text + THIRD if count == 3 else text)


def pd(prefill_groups=1, image="quay.io/ascend/vllm-ascend:v0.13.0rc1"):
    text = (UPSTREAM_PD % "proxy: {host: tb1, port: 8000}").replace("quay.io/ascend/vllm-ascend:v0.13.0rc1", image)
    if prefill_groups == 2:
        text = text.replace("prefill: [{hosts: [tb1], dp: 2, tp: 1, port: 9100, devices: [0, 1]}]",
                            "prefill: [{hosts: [tb1], dp: 2, tp: 1, port: 9100, devices: [0, 1]}, "
                            "{hosts: [tb1], dp: 2, tp: 1, port: 9300, devices: [4, 5]}]")
    return load_spec_text(text)


def front_digest(spec):
    container = container_for(spec, spec.front, None, NETWORKS)
    image = f"image:{container.image}" if spec.front.role == "router" else IMAGE
    return digest_of(container, image, None, spec)


def test_the_fronts_identity_holds_no_list_where_it_changes_its_list_while_serving():
    assert front_digest(mixed(2)) == front_digest(mixed(3))
    argv = container_for(mixed(3), mixed(3).front).command
    assert argv[argv.index("--worker-urls") + 1:] == ("http://10.200.0.11:9001", "http://10.200.0.11:9002",
                                                      "http://10.200.0.11:9003")  # a restart serves them all
    assert front_digest(pd(1)) == front_digest(pd(2))
    assert "9300" in container_for(pd(2), pd(2).front, None, NETWORKS).command  # it cannot start without its lists
    # a proxy that cannot change its list (before v0.13.0rc1) is another proxy for another list
    old = "quay.io/ascend/vllm-ascend:v0.11.0"
    assert front_digest(pd(1, old)) != front_digest(pd(2, old))


def test_an_added_instance_goes_into_the_kept_router_once_it_serves():
    before, after = mixed(2), mixed(3)
    listed = {"10.200.0.11:9001": "mixed", "10.200.0.11:9002": "mixed"}
    plan = plan_up(after, running(before, front_list=listed), UpInputs())
    names = [s.name for s in plan.stages if s.steps]
    assert [s.action for s in plan.steps if s.stage == "router"] == ["keep"]
    assert not [s for s in plan.steps if s.stage == "stop"]
    assert names.index("workers") < names.index("router") < names.index("route") < names.index("answers")
    (route,) = [s for s in plan.steps if s.stage == "route"]
    assert [c.argv[-1] for c in route.commands] == [
        "http://127.0.0.1:8000/add_worker?url=http%3A%2F%2F10.200.0.11%3A9003"]
    assert route.undo[0].argv[-1].endswith("/remove_worker?url=http%3A%2F%2F10.200.0.11%3A9003")
    assert route.actions[0].keys == ("10.200.0.11:9003",)


def test_a_retired_instance_leaves_the_kept_router_and_drains_before_it_stops():
    before, after = mixed(3), mixed(2)
    listed = {"10.200.0.11:9001": "mixed", "10.200.0.11:9002": "mixed", "10.200.0.11:9003": "mixed"}
    plan = plan_up(after, running(before, front_list=listed), UpInputs(drain_timeout=40))
    names = [s.name for s in plan.stages if s.steps]
    assert names.index("drain") < names.index("stop")
    (drain,) = [s for s in plan.steps if s.stage == "drain"]
    assert [c.argv[-1] for c in drain.commands] == [
        "http://127.0.0.1:8000/remove_worker?url=http%3A%2F%2F10.200.0.11%3A9003"]
    assert drain.actions[0].servers == (("10.200.0.11:9003", "http://10.200.0.11:9003/metrics"),)
    assert drain.actions[0].timeout == 40 and drain.late_undo[0].argv[-1].endswith("/add_worker?url=http%3A%2F%2F"
                                                                                   "10.200.0.11%3A9003")
    assert [(s.container, s.action) for s in plan.steps if s.stage == "stop"] == [("mix2-mixed-2", "remove")]
    assert [s.action for s in plan.steps if s.stage == "router"] == ["keep"]


def test_the_proxy_takes_a_retired_group_out_by_its_role():
    after = pd(1)
    listed = {"10.200.0.11:9100": "prefill", "10.200.0.11:9300": "prefill", "10.200.0.11:9200": "decode"}
    stages = membership_stages(after, ((_keep_front(after)),), listed, {"tb1": "10.200.0.11"}, 30)
    (drain,) = stages[0].steps
    (remove,) = drain.commands
    assert remove.argv[remove.argv.index("--data-binary") + 1] == '{"type":"prefill","instances":["10.200.0.11:9300"]}'


def test_nothing_is_put_to_a_front_whose_list_is_unknown_or_that_starts_now():
    spec = mixed(3)
    assert membership_stages(spec, (_keep_front(spec),), None, {"tb1": "10.200.0.11"}, 30) == (_keep_front(spec),)
    plan = plan_up(spec, {"tb1": deployed(image_id=IMAGE)}, UpInputs())  # the new router's argv lists all three
    assert not [s for s in plan.steps if s.stage == "route"]


def test_the_front_host_gathers_what_the_front_lists():
    spec = mixed(2)
    (probe,) = [p for p in state_probes(spec, "tb1") if p.key == FRONT_LIST_KEY]
    assert probe.argv[-1] == "http://127.0.0.1:8000/list_workers"
    facts = host_facts_from([(probe, ProbeOutput(0, '{"urls": ["http://10.200.0.11:9001"]}'))])
    assert facts.front_list == {"10.200.0.11:9001": "mixed"}
    failed = host_facts_from([(probe, ProbeOutput(7, "", "curl: (7) Failed to connect"))])
    assert failed.front_list is None and failed.probe_error(FRONT_LIST_KEY)
    garbage = host_facts_from([(front_list_probe(front_of(spec)), ProbeOutput(0, "<html>"))])
    assert garbage.front_list is None and "expected the vllm-router's list" in garbage.probe_error(FRONT_LIST_KEY)


def _keep_front(spec):
    from deployctl.plan.model import Stage, Step

    return Stage(spec.front.role, (Step("tb1", spec.front.role, "keep", "running", container=spec.front.name),))


def test_a_dp_group_that_changes_its_ranks_behind_a_kept_proxy_is_recreated_whole():
    """dp 2 -> 1 of the decode group: rank 1 retires while rank 0 is replaced; a wave would stop rank 1 while its
    group serves (the ranks of one group fail together), so the update recreates, and says why."""
    from deployctl.plan.front import reach
    from deployctl.plan.rollout import plan_rollout
    from deployctl.plan.up import desired_containers, plan_containers

    before = pd(1)
    after = load_spec_text((UPSTREAM_PD % "proxy: {host: tb1, port: 8000}").replace(
        "decode: [{hosts: [tb1], dp: 2, tp: 1, port: 9200, devices: [2, 3]}]",
        "decode: [{hosts: [tb1], dp: 1, tp: 1, port: 9200, devices: [2]}]"))
    facts = deployed_upstream(before, NETWORKS)
    stages = plan_containers(after, facts, None, None, desired_containers(after, None, NETWORKS))
    assert [s.action for st in stages for s in st.steps if s.container == after.front.name] == ["keep"]
    planned, summary = plan_rollout(after, stages, facts, reach(after, NETWORKS))
    assert summary["strategy"] == "recreate" and "changes its ranks" in summary["gap"]
    assert not [s for s in planned if s.wave]
