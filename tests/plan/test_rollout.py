"""plan/rollout.py: a changed serving deployment behind a front that can change its list is replaced in drain
waves (out of the front, drained, stopped gracefully, replaced, checked, back in); otherwise recreate, said."""

from __future__ import annotations

import json
from dataclasses import replace

from deployctl.facts.listening import Listening
from deployctl.facts.model import ContainerDevices
from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_DIGEST, container_for
from deployctl.plan.up import UpInputs, digest_of, plan_up
from deployctl.servers.vllm_ascend.groups import kv_ports
from deployctl.spec.load import load_spec_text
from tests.plan.hostfacts import deployed, running
from tests.spec.test_front_rules import MIXED, ROUTER, UPSTREAM_PD

IMAGE = "sha256:img"


def mixed(extra="", seqs=8):
    return load_spec_text((MIXED % ROUTER).replace("max_num_seqs: 8", f"max_num_seqs: {seqs}") + extra)


def shape(plan):
    return [(s.name, s.wave) for s in plan.stages if s.steps and s.name not in ("checks", "image", "files")]


def test_a_changed_mixed_deployment_is_replaced_one_instance_a_wave_through_the_router():
    before = mixed()
    plan = plan_up(mixed(seqs=16), running(before), UpInputs(drain_timeout=45, shutdown_timeout=20))
    waves = [(stage, n) for n in (1, 2) for stage in ("drain", "stop", "workers", "contract", "route")]
    assert shape(plan)[:10] == waves and shape(plan)[10:] == [("router", 0), ("answers", 0), ("verify", 0)]
    assert plan.stages[[s.name for s in plan.stages].index("route")].commit
    drain = next(s for s in plan.steps if s.stage == "drain")
    assert drain.host == "tb1" and drain.commands[0].argv[-1].endswith("/remove_worker?url=http%3A%2F%2F10.200.0.11%3A9001")
    assert drain.actions[0].servers == (("mix2-mixed-0", "http://10.200.0.11:9001/metrics"),)
    assert drain.actions[0].timeout == 45 and drain.late_undo[0].argv[-1].endswith("/add_worker?url=http%3A%2F%2F10.200.0.11%3A9001")
    stop = next(s for s in plan.steps if s.stage == "stop")
    assert ("docker", "stop", "--time", "20", "mix2-mixed-0") in [c.argv for c in stop.commands]
    answers = next(s for s in plan.steps if s.stage == "answers")
    assert [p.name for p in answers.actions[0].paths] == ["mix2-mixed-0", "mix2-mixed-1"]  # with one left alone
    # one token a wave, asked beside the contract check; the whole --answer-tokens check once, after the waves
    contract = next(s for s in plan.stages if s.name == "contract" and s.wave == 1)
    assert [st.stage for st in contract.steps] == ["contract", "answers"] and answers.actions[0].tokens == 1
    assert all(json.loads(p.body)["max_tokens"] == 1 for p in answers.actions[0].paths)
    (last,) = [s for s in plan.steps if s.stage == "answers" and not s.wave]
    assert last.actions[0].tokens == 8
    assert [s.action for s in plan.steps if s.stage == "router"] == ["keep"]
    doc = plan.to_json()
    assert doc["rollout"]["strategy"] == "drain" and [w["units"] for w in doc["rollout"]["waves"]] == [
        ["mix2-mixed-0"], ["mix2-mixed-1"]]
    assert {e.get("wave") for e in doc["steps"] if e["stage"] == "drain"} == {1, 2}


def test_max_unavailable_takes_more_a_wave_but_never_the_last_of_a_role():
    before = mixed()
    plan = plan_up(mixed("rollout: {max_unavailable: 5}\n", seqs=16), running(before), UpInputs())
    assert [w["units"] for w in plan.rollout["waves"]] == [["mix2-mixed-0"], ["mix2-mixed-1"]]


def test_recreate_keeps_todays_order_and_says_the_gap():
    before = mixed()
    plan = plan_up(mixed("rollout: {strategy: recreate}\n", seqs=16), running(before), UpInputs())
    assert [n for n, _ in shape(plan)] == ["stop", "workers", "contract", "route", "router", "answers", "verify"]
    assert plan.rollout["strategy"] == "recreate" and "requests in flight on them fail" in plan.rollout["gap"]
    (route,) = [s for s in plan.steps if s.stage == "route"]  # the router forgets what it saw while they were down
    assert [c.argv[-1].split("?")[0].rsplit("/", 1)[1] for c in route.commands] == ["remove_worker"] * 2 + [
        "add_worker"] * 2


def test_a_rerun_or_a_replaced_front_plans_no_drain():
    spec = mixed()
    assert plan_up(spec, running(spec), UpInputs()).rollout is None
    moved = mixed(seqs=16)
    policy = load_spec_text((MIXED % ROUTER.replace("}", ", policy: random}")).replace("max_num_seqs: 8",
                                                                                       "max_num_seqs: 16"))
    plan = plan_up(policy, running(spec), UpInputs())
    assert plan.rollout["strategy"] == "recreate" and "the front itself is replaced" in plan.rollout["gap"]
    assert plan_up(moved, running(spec), UpInputs()).rollout["strategy"] == "drain"


def test_the_router_is_not_replaced_when_only_the_server_image_changes():
    spec = mixed()
    facts = running(spec, "sha256:old")
    facts["tb1"] = deployed(facts["tb1"].deployed.containers, "sha256:new")
    plan = plan_up(spec, facts, UpInputs())
    assert [s.action for s in plan.steps if s.stage == "router"] == ["keep"]
    assert plan.rollout["strategy"] == "drain" and len(plan.rollout["waves"]) == 2


def four_groups_pd() -> str:
    """vllm-ascend P/D behind the proxy: two prefill and two decode groups of one rank each, on tb1."""
    return (UPSTREAM_PD % "proxy: {host: tb1, port: 8000}").replace(
        "  prefill: [{hosts: [tb1], dp: 2, tp: 1, port: 9100, devices: [0, 1]}]\n"
        "  decode: [{hosts: [tb1], dp: 2, tp: 1, port: 9200, devices: [2, 3]}]\n",
        "  prefill:\n    - {hosts: [tb1], dp: 1, tp: 1, port: 9100, devices: [0]}\n"
        "    - {hosts: [tb1], dp: 1, tp: 1, port: 9110, devices: [1]}\n"
        "  decode:\n    - {hosts: [tb1], dp: 1, tp: 1, port: 9200, devices: [2]}\n"
        "    - {hosts: [tb1], dp: 1, tp: 1, port: 9210, devices: [3]}\n")


def test_vllm_ascend_pd_drains_whole_groups_a_prefill_and_a_decode_a_wave():
    text = four_groups_pd()
    before = load_spec_text(text)
    after = load_spec_text(text.replace("model: {served_name: tiny}", "model: {served_name: tiny, max_num_seqs: 4}"))
    assert before.front_spec.kind == "proxy"
    units = [w["units"] for w in plan_rollout_units(before, after)]
    assert units == [["prefill0", "decode0"], ["prefill1", "decode1"]]


def deployed_upstream(spec, networks):
    """tb1's deployed state where every container of a vllm-ascend `spec` runs with its digest."""
    out = []
    for instance in spec.instances:
        container = container_for(spec, instance, None, networks)
        labels = {LABEL_DEPLOYMENT: spec.name, LABEL_DIGEST: digest_of(container, IMAGE, None, spec)}
        out.append(ContainerDevices("id-" + instance.name, instance.name, True, tuple(sorted(labels.items())),
                                    (), tuple(instance.devices), (), state="running", image_id=IMAGE, image="img"))
    return {"tb1": deployed(tuple(out), IMAGE).deployed}


def plan_rollout_units(before, after):
    """plan_rollout on the container stages alone (vllm-ascend needs host networks for the full plan_up)."""
    from deployctl.plan.front import reach
    from deployctl.plan.rollout import plan_rollout
    from deployctl.plan.up import desired_containers, plan_containers
    from deployctl.servers.vllm_ascend.upstream import HostNetwork

    networks = {"tb1": HostNetwork("10.200.0.11", "eth0", 8)}
    facts = deployed_upstream(before, networks)
    stages = plan_containers(after, facts, None, None, desired_containers(after, None, networks))
    planned, summary = plan_rollout(after, stages, facts, reach(after, networks))
    drains = [s for s in planned if s.name == "drain"]
    calls = [c.argv[c.argv.index("--data-binary") + 1] for c in drains[0].steps[0].commands]
    assert calls == ['{"type":"prefill","instances":["10.200.0.11:9100"]}',
                     '{"type":"decode","instances":["10.200.0.11:9200"]}']
    return summary["waves"]


def test_plan_says_the_strategy_each_wave_and_the_gap():
    from deployctl.ui import rollout_lines

    plan = plan_up(mixed(seqs=16), running(mixed()), UpInputs())
    assert rollout_lines(plan.rollout) == ["rollout: drain through the vllm-router", "  wave 1: mix2-mixed-0",
                                           "  wave 2: mix2-mixed-1"]
    recreate = plan_up(mixed("rollout: {strategy: recreate}\n", seqs=16), running(mixed()), UpInputs()).rollout
    assert rollout_lines(recreate)[0] == "rollout: recreate" and rollout_lines(recreate)[1].startswith("  gap: ")


ONE = MIXED.replace("    - {host: tb1, devices: [1], port: 9002}\n", "")


def test_a_single_instance_with_a_free_card_surges_so_something_always_serves():
    from dataclasses import replace

    from deployctl.facts.host_layout import HostLayout
    from deployctl.facts.listening import Listening

    before = load_spec_text(ONE % ROUTER)
    after = load_spec_text((ONE % ROUTER).replace("max_num_seqs: 8", "max_num_seqs: 16") + "rollout: {max_surge: 1}\n")
    facts = running(before)
    facts["tb1"] = replace(facts["tb1"], layout=HostLayout(tuple(range(8)), False),
                           listening=Listening(frozenset({8000, 9001, 10001}), (32768, 60999)))
    plan = plan_up(after, facts, UpInputs())
    assert shape(plan)[:9] == [(s, 1) for s in ("surge", "route", "drain", "stop", "workers", "contract", "route",
                                                "drain", "stop")]
    (surge,) = [s for s in plan.steps if s.stage == "surge"]
    run = surge.commands[-1].argv
    assert surge.container == "mix2-mixed-0-surge" and run[run.index("--device") + 1] == "/dev/davinci1"
    assert "10002" in run and surge.health.port == 10002  # 10001 is taken on the host
    assert [s.commit for s in plan.stages if s.wave] == [False] * 8 + [True]
    wave = plan.rollout["waves"][0]
    assert wave["surge"] == ["mix2-mixed-0-surge on tb1 devices 1 port 10002"] and "gap" not in plan.rollout
    assert plan_up(after.__class__(**{**after.__dict__, "rollout": before.rollout}), facts, UpInputs()).rollout[
        "gap"].startswith("mixed: its one instance goes out of the front")


def test_the_ascendcloud_scheduler_flow_says_its_update_has_a_gap_and_how_long():
    from tests.spec.test_front_rules import ASCENDCLOUD_PD

    text = ASCENDCLOUD_PD.replace("  front: {kind: vllm-router, host: tb1, image: r}\n", "")
    before, after = load_spec_text(text), load_spec_text(text.replace("max_num_seqs: 8", "max_num_seqs: 16"))
    from deployctl.plan.model import Stage, Step
    from deployctl.plan.rollout import plan_rollout

    facts = running(before)["tb1"].deployed
    stop = Stage("stop", tuple(Step("tb1", "stop", "replace", container=i.name) for i in after.instances
                               if i.role in ("prefill", "decode")))
    planned, summary = plan_rollout(after, (stop,), {"tb1": facts}, {"tb1": "10.200.0.11"})
    assert planned == (stop,) and summary["strategy"] == "recreate" and summary["front"] == "scheduler"
    assert "NODE_PORTS" in summary["gap"] and "at most 1200 s" in summary["gap"] and "test bed" in summary["gap"]


def test_the_front_seam_drains_a_whole_unit_for_a_restart_outside_up():
    from deployctl.plan.front import reach
    from deployctl.plan.rollout import front_steps

    spec = mixed()
    out, back = front_steps(spec, ("mix2-mixed-1",), reach(spec), 10)
    assert out.commands[0].argv[-1].endswith("remove_worker?url=http%3A%2F%2F10.200.0.11%3A9002")
    assert out.actions[0].servers == (("mix2-mixed-1", "http://10.200.0.11:9002/metrics"),)
    assert back.commands[0].argv[-1].endswith("add_worker?url=http%3A%2F%2F10.200.0.11%3A9002")
    assert back.actions[0].keys == ("10.200.0.11:9002",)
    no_front = load_spec_text(MIXED.replace("  front: %s\n", ""))
    assert front_steps(no_front, ("mix2-mixed-1",), reach(no_front)) is None


def test_a_vllm_ascend_dp_group_surges_whole_as_a_new_group_on_free_cards_before_it_drains():
    """max_surge for the P/D shape: each wave's first group starts again as a new group (its own index, so its own
    engine id, and free API, kv and rpc ports) on cards free on its host, goes into the proxy, and only then is the
    old group drained; after the wave the surge group is drained and removed."""
    from deployctl.plan.containers import docker_run
    from deployctl.plan.front import reach
    from deployctl.plan.rollout import Spare, plan_rollout
    from deployctl.plan.up import desired_containers, plan_containers
    from deployctl.servers.vllm_ascend.upstream import HostNetwork

    text = four_groups_pd()
    before = load_spec_text(text)
    after = load_spec_text(text.replace("model: {served_name: tiny}", "model: {served_name: tiny, max_num_seqs: 4}")
                           + "rollout: {max_surge: 1}\n")
    networks = {"tb1": HostNetwork("10.200.0.11", "eth0", 8)}
    facts = deployed_upstream(before, networks)
    stages = plan_containers(after, facts, None, None, desired_containers(after, None, networks))
    runs = {}

    def surge_container(instance):
        container = container_for(after, instance, None, networks)
        runs[instance.name] = container
        return Command(docker_run(container, "surge")), None

    from deployctl.core import Command

    spare = {"tb1": Spare((4, 5, 6, 7), frozenset({8000, 9100, 9110, 9200, 9210}))}
    planned, summary = plan_rollout(after, stages, facts, reach(after, networks), spare=spare,
                                    surge_container=surge_container)
    # a wave's surge group is gone when the wave ends: the next one starts on the same free card
    assert [w["surge"] for w in summary["waves"]] == [
        ["pd-prefill0-r0-surge on tb1 devices 4 port 10100"], ["pd-prefill1-r0-surge on tb1 devices 4 port 10110"]]
    first = [(s.name, s.wave) for s in planned if s.wave == 1]
    assert first[:3] == [("surge", 1), ("route", 1), ("drain", 1)] and first[-2:] == [("drain", 1), ("stop", 1)]
    argv = runs["pd-prefill0-r0-surge"].command
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config["engine_id"] == "pd-prefill4" and config["kv_role"] == "kv_producer"
    assert "--port" in argv and argv[argv.index("--port") + 1] == "10100"
    put = next(s for s in planned if s.name == "route" and s.wave == 1).steps[0]
    assert put.commands[0].argv[-2] == '{"type":"prefill","instances":["10.200.0.11:10100"]}'
    # its rpc and kv ports are its own, clear of every group of the spec
    spec_ports = {p for i in after.instances if i.server for p in (i.server.group.data_parallel_rpc_port,
                                                                   i.server.kv_port)}
    mine = runs["pd-prefill0-r0-surge"].instance.server
    assert mine.group.data_parallel_rpc_port not in spec_ports and mine.kv_port not in spec_ports
    # where the host's ephemeral range holds them, its kv ports are reserved before it starts (as `up` does the
    # spec's: plan/reserve_ports.py); not again once reserved
    def first_wave(reserved):
        listening = Listening(spare["tb1"].ports, (29000, 60999), frozenset(reserved))
        planned, _ = plan_rollout(after, stages, facts, reach(after, networks), spare={"tb1": replace(
            spare["tb1"], listening=listening)}, surge_container=surge_container)
        return [s for s in planned if s.wave == 1]

    assert kv_ports(mine.group, "tb1") == (mine.kv_port,) == (29000,)  # one rank of tp 1
    first = first_wave(())
    assert [s.name for s in first[:3]] == ["ports", "surge", "route"]
    (reserve,) = first[0].steps
    assert reserve.commands[0].argv[-1] == "29000" and "29000 (pd-prefill0-r0-surge kv ports)" in reserve.reason
    assert [s.name for s in first_wave({29000})[:2]] == ["surge", "route"]


def test_a_server_with_a_longer_shutdown_timeout_of_its_own_gets_as_long_from_docker_stop():
    """vLLM drains for its own --shutdown-timeout after SIGTERM: docker's SIGKILL must not come sooner."""
    own = "max_num_seqs: 8, extra_args: ['--shutdown-timeout=300']"
    before = load_spec_text((MIXED % ROUTER).replace("max_num_seqs: 8", own))
    after = load_spec_text((MIXED % ROUTER).replace("max_num_seqs: 8", own.replace("8", "16", 1)))
    plan = plan_up(after, running(before), UpInputs(shutdown_timeout=20))
    stops = [c.argv for s in plan.steps if s.stage == "stop" for c in s.commands if c.argv[:2] == ("docker", "stop")]
    assert stops == [("docker", "stop", "--time", "300", "mix2-mixed-0"),
                     ("docker", "stop", "--time", "300", "mix2-mixed-1")]
    plan = plan_up(after, running(before), UpInputs(shutdown_timeout=600))  # and `up`'s own when longer
    assert {c.argv[3] for s in plan.steps if s.stage == "stop" for c in s.commands if c.argv[1] == "stop"} == {"600"}


def test_a_surge_reads_each_hosts_cards_once_whichever_flavour_probes_them():
    """A surge needs the host's free cards: vllm-ascend's own host probes read them already (servers/base.py
    host_probes), any other flavour's `up` adds the layout probe after the listening one."""
    from deployctl.plan.probes import state_probes

    upstream = load_spec_text(four_groups_pd() + "rollout: {max_surge: 1}\n")
    assert [p.key for p in state_probes(upstream, "tb1", stages=frozenset({"containers"}))] == [
        "deployed", "bound_addresses", "layout", "image_version", "listening", "front_list"]
    keys = [p.key for p in state_probes(mixed("rollout: {max_surge: 1}\n"), "tb1", stages=frozenset({"containers"}))]
    assert keys[keys.index("listening"):].count("layout") == 1 and "bound_addresses" not in keys
