"""`deployctl watch`, pure half: verdicts from two probes (stall vs saturation vs idle vs engine death vs a known
error in the logs), restart units (a whole DP group; anything else alone), the restart plan (the same containers
stopped and started by the executor, checked to be the ones observed) and the front's seam."""

from __future__ import annotations


import pytest

from deployctl.facts.liveness import Answer
from deployctl.facts.model import HostFacts
from deployctl.plan.model import Step
from deployctl.bench.telemetry import Engine
from deployctl.plan.watch import (Observation, Restart, Verdict, history_record, judge, missing_members,
                                  restart_plan, restarts, unit_of)
from deployctl.spec.load import load_spec_text
from tests.plan.test_image_stage import SPEC as GPU_MIXED
from tests.spec.test_upstream_build import QWEN3

GOOD, HUNG = Answer(200, 120), Answer(0, 0)


def counted(index, generation_tokens, prompt_tokens, running, waiting) -> Engine:
    """An engine's counters as watch keeps them (bench/telemetry.py's Engine, named by its index)."""
    return Engine(index, running=running, waiting=waiting, generation_tokens=generation_tokens,
                  prompt_tokens=prompt_tokens)


def obs(time, tokens=None, running=0, waiting=0, *, liveness=GOOD, health=200, state="running", cid="c1",
        engines=None, signatures=(), name="d-mixed0-r0"):
    counters = engines if engines is not None else (
        {} if tokens is None else {"0": counted("0", tokens, 10.0, running, waiting)})
    return Observation(name, "h1", time, state, cid, health_code=health, liveness=liveness, engines=counters,
                       signatures=signatures)


# --- verdicts ---------------------------------------------------------------------------------------------------

def test_tokens_flat_while_requests_run_or_wait_is_a_stall_naming_the_engine():
    verdict = judge(obs(0, 500, running=2, waiting=3), obs(30, 500, running=2, waiting=4, liveness=HUNG))
    assert verdict.state == "stalled" and verdict.restarts
    assert verdict.reason == "engine 0: no token generated in 30.0 s while 2 running, 4 waiting"


def test_saturation_a_long_queue_with_slow_advancing_tokens_is_busy_even_when_the_one_token_probe_times_out():
    before, after = obs(0, 500, running=16, waiting=200), obs(30, 531, running=16, waiting=210, liveness=HUNG)
    verdict = judge(before, after, hang_timeout=15)
    assert verdict.state == "busy" and not verdict.restarts
    assert verdict.reason == ("a one-token generate did not finish within 15 s, but 30 token(s) generated in 30.0 s "
                              "(a long queue)")
    assert judge(before, obs(30, 502, running=16, waiting=210)).state == "busy"


def test_idle_with_flat_tokens_is_not_a_stall():
    verdict = judge(obs(0, 500), obs(30, 501))  # the previous probe's one token
    assert (verdict.state, verdict.reason) == ("idle", "no request held")
    # flat but nothing held at the probe before: a request that just arrived, judged at the next probe
    assert judge(obs(0, 500), obs(30, 500, waiting=1)).state == "busy"


def test_a_one_token_generate_that_does_not_finish_with_no_progress_is_a_stall_once_there_is_a_probe_before():
    assert judge(None, obs(0, 500, liveness=HUNG)).state == "suspect"  # the first probe has nothing to compare
    # idle at the probe before (its one-token generate answered, nothing held): a second probe confirms it, as a
    # burst that arrived since may still be in its first prefill
    idle, hung = obs(0, 500), obs(30, 501, liveness=HUNG)  # 501: the token of the probe before itself
    assert judge(idle, hung).state == "suspect"
    verdict = judge(hung, obs(60, 501, liveness=HUNG), hang_timeout=15)
    assert (verdict.state, verdict.reason) == (
        "stalled", "a one-token generate did not finish within 15 s and no token was generated in 30.0 s")
    # requests held at the probe before and none advanced since: at once
    assert judge(obs(0, 500, running=1), obs(30, 501, liveness=HUNG)).state == "stalled"
    assert judge(obs(0, 500, liveness=HUNG), obs(30, 501, waiting=1, liveness=HUNG)).state == "busy"
    # without /metrics: two failed probes in a row
    assert judge(obs(0), obs(30, liveness=HUNG)).state == "suspect"
    assert judge(obs(0, liveness=HUNG), obs(30, liveness=HUNG)).state == "stalled"


def test_one_stalled_engine_of_an_internal_dp_server_is_named():
    def counters(zero, one):
        return {"0": counted("0", zero, 0.0, 1, 0), "1": counted("1", one, 0.0, 0, 2)}

    verdict = judge(obs(0, engines=counters(100, 40)), obs(10, engines=counters(150, 40)))
    assert verdict.state == "stalled" and verdict.reason.startswith("engine 1: no token generated in 10.0 s")


def test_engine_dead_health_503_restarts_and_an_unanswered_health_needs_two_probes():
    assert judge(None, obs(0, 500, health=503)).state == "engine-dead"
    assert judge(None, obs(0, health=0)).state == "suspect"
    assert judge(obs(0, health=0), obs(30, health=0)).state == "unresponsive"
    assert judge(obs(0, health=0), obs(30, health=0), starting=True).state == "starting"


def test_a_known_error_in_new_log_lines_is_a_stall_even_with_health_200():
    line = "ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."
    verdict = judge(obs(0, 500), obs(30, 520, signatures=(("engine_core_died", line),)))
    assert verdict.state == "stalled" and verdict.reason == f"known error in its new log lines: engine_core_died: {line}"
    dead = judge(None, obs(0, 500, health=503, signatures=(("engine_core_died", line),)))
    assert dead.state == "engine-dead" and dead.reason.endswith(f"; known error in its new log lines: "
                                                                f"engine_core_died: {line}")


def test_container_states_and_another_container_since():
    assert judge(None, obs(0, state="exited")).state == "down"
    assert judge(None, Observation("n", "h1", 0, "missing")).state == "missing"
    assert judge(None, Observation("n", "h1", 0, "unreachable")).state == "unreachable"
    # an `up` replaced the container between the probes: its counters are not comparable
    assert judge(obs(0, 500, running=1, cid="old"), obs(30, 500, running=1, cid="new")).state == "busy"
    # the front is restarted only when its container stopped
    assert judge(None, obs(0, health=503), front=True).state == "unhealthy"
    assert judge(None, obs(0, state="exited"), front=True).state == "down"
    # a headless server: running is all it shows
    assert judge(None, obs(0, health=None, liveness=None)).state == "healthy"


def test_observations_survive_the_state_file():
    before = obs(12.5, 500, running=2, waiting=1, liveness=HUNG)
    again = Observation.from_json(before.to_json())
    assert again == Observation(before.instance, before.host, before.time, before.state, before.container_id,
                                health_code=200, liveness=HUNG, engines=before.engines)


# --- units and plans --------------------------------------------------------------------------------------------

def qwen3():
    return load_spec_text(QWEN3 % "external")


def stalled(name):
    return Verdict(name, "node2", "stalled", "engine 0: no token generated in 30.0 s while 1 running, 0 waiting")


def test_a_stalled_rank_restarts_its_whole_dp_group_across_hosts_and_nothing_else():
    spec = qwen3()
    found = restarts(spec, [stalled("qwen3-decode0-r5"), stalled("qwen3-decode0-r6"),
                            Verdict("qwen3-prefill0-r0", "node1", "busy", "...")])
    assert [(r.unit, [i.name for i in r.instances]) for r in found] == [
        ("decode0", [f"qwen3-decode0-r{r}" for r in range(8)])]
    assert {i.host for i in found[0].instances} == {"node2", "node3"}
    assert found[0].reason.startswith("qwen3-decode0-r5: stalled: engine 0") and "qwen3-decode0-r6" in found[0].reason


def test_ascendcloud_and_gpu_instances_restart_alone():
    spec = load_spec_text(GPU_MIXED.replace("WHERE", "once"))
    name = spec.instances[1].name
    assert unit_of(spec, spec.instances[1]) == (name, (spec.instances[1],))
    assert [r.unit for r in restarts(spec, [Verdict(name, "b", "engine-dead", "health 503")])] == [name]
    assert restarts(spec, [Verdict(name, "b", "missing", "no container")]) == ()


def test_the_restart_plan_stops_then_starts_the_same_containers_checked_to_be_the_ones_observed():
    spec = qwen3()
    restart = restarts(spec, [stalled("qwen3-prefill0-r1")])[0]
    plan = restart_plan(spec, restart, {"qwen3-prefill0-r0": "id0", "qwen3-prefill0-r1": "id1"})
    assert [s.name for s in plan.stages] == ["stop", "workers"]  # no front addresses given: the front is left alone
    stops, starts = plan.stages[0].steps, plan.stages[1].steps
    assert [s.container for s in stops] == [s.container for s in starts] == ["qwen3-prefill0-r0", "qwen3-prefill0-r1"]
    assert [c.argv for c in stops[1].commands] == [
        ("sh", "-c", '[ "$(docker inspect --format "{{.Id}}" "$1" 2>/dev/null)" = "$2" ]', "sh",
         "qwen3-prefill0-r1", "id1"),
        ("docker", "stop", "--time", "30", "qwen3-prefill0-r1")]
    assert "no longer the container watch observed" in stops[1].commands[0].failure
    assert [c.argv for c in starts[1].commands] == [("docker", "start", "qwen3-prefill0-r1")]
    assert (starts[1].health.port, starts[1].health.path) == (9101, "/health")
    assert all(not s.undo for s in stops + starts)  # a restart has nothing to roll back to
    assert missing_members(restart, {"qwen3-prefill0-r0": "id0", "qwen3-prefill0-r1": "id1"}) == ()
    assert missing_members(restart, {"qwen3-prefill0-r0": "id0", "qwen3-prefill0-r1": None}) == ("qwen3-prefill0-r1",)
    # a container that was missing is not touched
    assert [s.container for s in restart_plan(spec, restart, {"qwen3-prefill0-r0": "id0"}).stages[0].steps] == [
        "qwen3-prefill0-r0"]
    assert history_record(restart, "ok") == {
        "action": "watch restart", "unit": "prefill0", "containers": ["qwen3-prefill0-r0", "qwen3-prefill0-r1"],
        "reason": restart.reason, "result": "ok"}


def test_a_restart_waits_the_servers_own_shutdown_timeout_as_up_does():
    """One stop policy (servers/shutdown.py): a server whose extra args hold --shutdown-timeout=300 drains for 300 s
    after SIGTERM; docker's SIGKILL at 30 would cut the requests `up` lets finish. `watch --shutdown-timeout` is
    the floor, as `up`'s."""
    spec = load_spec_text((QWEN3 % "external").replace(
        "port: 9100, env: {HCCL_BUFFSIZE: 1024}}",
        "port: 9100, env: {HCCL_BUFFSIZE: 1024}, model: {extra_args: [--shutdown-timeout=300]}}"))
    restart = restarts(spec, [stalled("qwen3-prefill0-r1")])[0]
    observed = {"qwen3-prefill0-r0": "id0", "qwen3-prefill0-r1": "id1"}
    stops = restart_plan(spec, restart, observed).stages[0].steps
    assert [c.argv for s in stops for c in s.commands if c.argv[:2] == ("docker", "stop")] == [
        ("docker", "stop", "--time", "300", "qwen3-prefill0-r0"), ("docker", "stop", "--time", "300", "qwen3-prefill0-r1")]
    longer = restart_plan(spec, restart, observed, shutdown_timeout=600).stages[0].steps
    assert {c.argv[3] for s in longer for c in s.commands if c.argv[:2] == ("docker", "stop")} == {"600"}


# the vllm-ascend P/D shape of the field report (issue 39): 2 prefill + 2 decode DP groups behind the proxy
PD_TWO_BY_TWO = (QWEN3 % "external").replace("  node3: {address: 10.200.0.13}\n", """  node3: {address: 10.200.0.13}
  node4: {address: 10.200.0.14}
""").split("  prefill:\n")[0] + """  prefill:
    - {hosts: [node1], dp: 2, tp: 8, port: 9100}
    - {hosts: [node2], dp: 2, tp: 8, port: 9100}
  decode:
    - {hosts: [node3], dp: 4, tp: 4, expert_parallel: true, port: 9100}
    - {hosts: [node4], dp: 4, tp: 4, expert_parallel: true, port: 9100}
"""


def test_a_decode_rank_that_refuses_a_bare_generate_is_judged_by_its_counters_not_stalled():
    """A one-token generate sent straight to a P/D decode rank: vllm-ascend's MooncakeConnector prefills a request
    without kv_transfer_params itself and answers it, but a connector that refuses it answers 400. An answer is
    no hang: two probes of 400 over idle counters are idle, never `stalled` (which restarted healthy decode groups
    on the field's P/D deployment), while a rank whose counters stay flat under requests is still stalled."""
    refused = Answer(400, 151)
    assert judge(obs(0, 10, liveness=refused), obs(5, 10, liveness=refused)).state == "idle"
    assert judge(None, obs(0, 10, liveness=refused)).state == "idle"
    hung = judge(obs(0, 10, running=1, liveness=refused), obs(5, 10, running=1, liveness=refused))
    assert hung.state == "stalled" and "engine 0: no token generated" in hung.reason
    assert judge(obs(0, 10, liveness=Answer(0, 0)), obs(5, 10, running=1, liveness=Answer(0, 0))).state == "stalled"
    assert judge(obs(0, 10), obs(5, 10, liveness=Answer(500, 80))).state in ("suspect", "stalled")  # 5xx: no answer


def test_a_server_still_loading_after_its_start_is_not_restarted():
    """A server `up` started (docker's StartedAt) answers no health while it loads its model, for minutes: within
    the start-up budget it is `starting`, at every probe; after it, unhealthy at two probes is `unresponsive`."""
    from deployctl.plan.watch import starting_up

    loading = [obs(t, liveness=None, health=0) for t in (100.0, 105.0)]
    loading = [Observation(o.instance, o.host, o.time, o.state, o.container_id, health_code=0, started=90.0)
               for o in loading]
    assert starting_up(loading[1], None, grace=1200.0) and not starting_up(loading[1], None, grace=10.0)
    assert starting_up(loading[1], 104.0, grace=10.0)  # watch restarted it since
    assert judge(loading[0], loading[1], starting=starting_up(loading[1], None, 1200.0)).state == "starting"
    assert judge(loading[0], loading[1], starting=starting_up(loading[1], None, 10.0)).state == "unresponsive"


def test_the_sole_unit_of_a_role_restarts_listed_and_one_of_two_leaves_the_front():
    """A restart never leaves a role empty in the front: the proxy's only decode group is not taken out (nothing
    else could take its requests, and a failed put-back would leave the proxy without decode); one of two is."""
    from deployctl.plan.front import reach

    spec = qwen3()  # one decode group
    restart = restarts(spec, [stalled("qwen3-decode0-r3")])[0]
    plan = restart_plan(spec, restart, {i.name: f"id-{i.name}" for i in restart.instances}, reach(spec))
    assert [s.name for s in plan.stages] == ["stop", "workers"]
    two = load_spec_text(PD_TWO_BY_TWO)
    assert [g.role for g in two.upstream.groups] == ["prefill", "prefill", "decode", "decode"]
    restart = restarts(two, [stalled("qwen3-decode1-r0")])[0]
    plan = restart_plan(two, restart, {i.name: f"id-{i.name}" for i in restart.instances}, reach(two))
    assert [s.name for s in plan.stages] == ["drain", "stop", "workers", "undrain"]


def test_the_whole_unit_leaves_the_front_before_the_stop_and_comes_back_after():
    """The rollout's own front steps (plan/rollout.py front_steps): every rank of the stalled one's group goes out
    of vllm-ascend's proxy and is drained, and is put back once it serves."""
    from deployctl.plan.front import front_of, reach
    from deployctl.plan.actions import AwaitListed, Drain

    spec = load_spec_text(PD_TWO_BY_TWO)
    assert front_of(spec).changes_list  # a release whose proxy has /instances/add|remove
    restart = restarts(spec, [stalled("qwen3-decode0-r3")])[0]
    plan = restart_plan(spec, restart, {i.name: f"id-{i.name}" for i in restart.instances}, reach(spec))
    assert [s.name for s in plan.stages] == ["drain", "stop", "workers", "undrain"]
    everyone = {f"qwen3-decode0-r{r}" for r in range(4)}
    (out,), (back,) = plan.stages[0].steps, plan.stages[3].steps
    assert out.host == back.host == spec.front.host
    (drain,) = [a for a in out.actions if isinstance(a, Drain)]
    assert {name for name, _ in drain.servers} == everyone
    # a stalled group's requests cannot finish: no wait for them (it waited out --drain-timeout, 120 s, first);
    # putting it back still waits for the front to list it
    assert drain.timeout == 0
    (listed,) = [a for a in back.actions if isinstance(a, AwaitListed)]
    assert listed.timeout > 0
    said = " ".join(" ".join(c.argv) for c in out.commands)
    assert "/instances/remove" in said and "/instances/add" in " ".join(" ".join(c.argv) for c in back.commands)


def test_restart_units_are_plain_data():
    restart = Restart("u", (), (stalled("x"),))
    assert restart.to_json() == {"unit": "u", "containers": [], "hosts": [], "reason": f"x: stalled: {stalled('x').reason}"}


# --- one probe's questions and what they show ---------------------------------------------------------------------

def container(name, cid, state="running"):
    from deployctl.facts.model import ContainerDevices

    return ContainerDevices(cid, name, state == "running", (), (), (), state=state, exit_code=0 if state == "running"
                            else 137)


def test_each_host_is_asked_once_with_every_question_and_the_front_gets_no_one_token_generate():
    from deployctl.plan.watch_probes import watch_probes

    spec = qwen3()
    probes = watch_probes(spec, "node1", {"qwen3-prefill0-r0": "2026-11-25T23:10:16.000000001Z"}, 3)
    assert [p.key for p in probes] == ["deployed", "progress", "liveness", "new_log_lines"]
    # the health and /metrics reads wait as long as the one-token generate may (3 s here; at least 2)
    assert probes[1].argv[4] == "3" and probes[1].argv[5:] == ("9100/health", "9101/health", "8000/healthcheck")
    assert watch_probes(spec, "node1", {}, 0.5)[1].argv[4] == "2"
    assert probes[2].argv[4] == "3" and probes[2].argv[6:] == ("9100/v1/completions", "9101/v1/completions")
    assert probes[3].argv[4:] == ("qwen3-prefill0-r0 2026-11-25T23:10:16.000000001Z", "qwen3-prefill0-r1 -",
                                  "qwen3-proxy -")
    assert watch_probes(spec, "elsewhere", {}, 3) == ()


def test_observations_from_one_hosts_facts_as_the_facts_assembly_makes_them():
    from deployctl.facts.assemble import ProbeOutput, host_facts_from
    from deployctl.facts.deployed import DeployedState
    from deployctl.facts.progress import NewLines, ServerProgress
    from deployctl.plan.watch_probes import observe, watch_probes

    spec = qwen3()
    died = "ERROR Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."
    engine = Engine("0", running=1.0, waiting=2.0, generation_tokens=7.0)
    facts = HostFacts(
        deployed=DeployedState(containers=(container("qwen3-prefill0-r0", "a"),
                                           container("qwen3-prefill0-r1", "b", "exited"))),
        progress={9100: ServerProgress(200, {"0": engine}), 9101: ServerProgress(0, {})},
        liveness={9100: HUNG},
        new_log_lines={"qwen3-prefill0-r0": NewLines((("t1", "INFO fine"), ("t2", died)), "t2")})
    r0, r1, proxy = observe(spec, "node1", facts, 5.0, {"qwen3-prefill0-r0": "a"})
    assert (r0.state, r0.health_code, r0.liveness, r0.engines["0"]) == ("running", 200, HUNG, engine)
    assert r0.signatures == (("engine_core_died", died),)
    assert (r1.state, r1.exit_code) == ("exited", 137)
    assert proxy.state == "missing"
    # the same lines from a container watch has not seen before (an `up` replaced it): a baseline, no finding
    again = observe(spec, "node1", facts, 5.0, {"qwen3-prefill0-r0": "older"})
    assert again[0].signatures == ()
    assert [o.state for o in observe(spec, "node1", None, 5.0, {})] == ["unreachable"] * 3
    # the answers go through facts/assemble.py: a failed probe leaves its part unknown, one that failed to run
    # at all (the daemon down) makes the host's servers unreachable
    deployed, progress, liveness, logs = watch_probes(spec, "node1", {}, 3)
    down = host_facts_from([(deployed, ProbeOutput(97, "", "Cannot connect to the Docker daemon")),
                            (progress, ProbeOutput(0, ""))])
    assert down.probe_error("deployed") and [o.state for o in observe(spec, "node1", down, 5.0, {})] == [
        "unreachable"] * 3
    answered = host_facts_from([(deployed, ProbeOutput(0, "[]\n@@deployctl@@\n\n@@deployctl@@\n@@deployctl@@\n")),
                                (liveness, ProbeOutput(1, "", "boom"))])
    assert [o.state for o in observe(spec, "node1", answered, 5.0, {})] == ["missing"] * 3


def test_vllm_0_33s_line_for_a_dead_engine_core_is_the_known_error():
    from deployctl.diagnose.signatures import Text, match

    line = "WARNING 11-25 23:10:16 [core_client.py:840] [shutdown] MPClient: engine core exited unexpectedly; starting cleanup"
    assert [h.id for h in match([Text("h", "c", "log", line)])] == ["engine_core_died"]


ROUTER_SPEC = """version: 1
name: scale
platform: gpu
hosts:
  gpu1: {address: 10.0.0.1}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny}
topology:
  mode: mixed
  front: {kind: vllm-router, host: gpu1, port: 8600, image: 'r:1'}
  instances:
    - {host: gpu1, devices: [0], port: 8601}
    - {host: gpu1, devices: [1], port: 8602}
    - {host: gpu1, devices: [2], port: 8603}
"""


def test_a_restarted_front_is_brought_to_the_specs_list_not_its_argvs():
    """A router's list is no part of its identity, so its argv keeps the lists of the `up` that created it: started
    again by watch (its container stopped), it must be put the spec's list once it serves."""
    from deployctl.plan.actions import SyncList
    from deployctl.plan.front import reach

    spec = load_spec_text(ROUTER_SPEC)
    restart = restarts(spec, [Verdict("scale-router", "gpu1", "down", "container exited (exit code 137)")])[0]
    plan = restart_plan(spec, restart, {"scale-router": "id-router"}, reach(spec))
    assert [s.name for s in plan.stages] == ["stop", "workers", "route"]
    (step,) = plan.stages[-1].steps
    (sync,) = step.actions
    assert isinstance(sync, SyncList) and sync.front_kind == "vllm-router" and sync.port == 8600
    assert [b.key for b in sync.wanted] == ["10.0.0.1:8601", "10.0.0.1:8602", "10.0.0.1:8603"]
    assert sync.command.argv[-1] == "http://127.0.0.1:8600/list_workers"
    # a server's restart leaves the front's list alone but for its own put-back
    server = restarts(spec, [stalled("scale-mixed-1")])[0]
    plan = restart_plan(spec, server, {"scale-mixed-1": "id-1"}, reach(spec))
    assert "route" not in [s.name for s in plan.stages]
