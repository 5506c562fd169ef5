"""plan_up: keep / create / replace / remove from facts; order of stages; devices never shared."""

import pytest

from deployctl.errors import PlanError
from deployctl.facts.model import ContainerDevices
from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_DIGEST, RanktableFiles, container_for
from deployctl.plan.down import plan_down
from deployctl.plan.up import UpInputs, digest_of, plan_up
from tests.plan.hostfacts import deployed
from tests.plan.test_containers import PD, ranktables, spec


def container_fact(id_, name, state, image_id, labels, npus=(), gpus=()):
    """A container as `docker inspect` describes it (facts.docker.parse_docker_inspect)."""
    return ContainerDevices(id_, name, state == "running", tuple(sorted(labels.items())),
                            tuple(f"/dev/davinci{n}" for n in npus), tuple(npus), tuple(gpus),
                            state=state, image_id=image_id, image="img")


def running(s, rts, image_id="sha256:img", **overrides):
    """Facts of a host where every container of the spec runs with its current digest."""
    containers = []
    for instance in s.instances:
        container = container_for(s, instance, rts)
        labels = {LABEL_DEPLOYMENT: s.name, "deployctl.role": instance.role,
                  LABEL_DIGEST: digest_of(container, image_id, rts)}
        state = overrides.get(instance.name, "running")
        containers.append(container_fact("id-" + instance.name, instance.name, state, image_id, labels,
                                         instance.devices))
    return containers


def facts_for(s, rts, containers, image_id="sha256:img", hashes=None):
    return {"node1": deployed(tuple(containers), image_id, hashes or {})}


def file_hashes(s, rts):
    import hashlib
    return {f"/var/lib/deployctl/{s.name}/ranktables/{n}": hashlib.sha256(c).hexdigest() for n, c in rts.contents.items()}


def actions(plan):
    return {(step.stage, step.container): step.action for step in plan.steps if step.container}


def test_fresh_host_creates_workers_then_scheduler_then_verifies():
    s = spec()
    rts = ranktables(s)
    plan = plan_up(s, facts_for(s, rts, []), UpInputs(rts))
    assert [stage.name for stage in plan.stages] == ["checks", "image", "files", "stop", "workers", "contract", "scheduler", "answers", "verify"]
    assert actions(plan)[("workers", "llama2-13b-pd-prefill-0")] == "create"
    assert actions(plan)[("scheduler", "llama2-13b-pd-scheduler-0")] == "create"
    assert plan.changed


def test_rerun_with_everything_running_changes_nothing():
    s = spec()
    rts = ranktables(s)
    plan = plan_up(s, facts_for(s, rts, running(s, rts), hashes={**file_hashes(s, rts), **env_hashes(s, rts)}), UpInputs(rts))
    assert not plan.changed
    assert all(step.action == "keep" for step in plan.steps)


def env_hashes(s, rts):
    import hashlib
    from deployctl.plan.containers import env_file_content
    out = {}
    for instance in s.instances:
        c = container_for(s, instance, rts)
        out[c.env_file] = hashlib.sha256(env_file_content(c)).hexdigest()
    return out


def test_decode_model_change_replaces_only_decode():
    s = spec()
    rts = ranktables(s)
    before = running(s, rts)
    changed = spec(PD.replace("model: {max_num_seqs: 512}", "model: {max_num_seqs: 128}"))
    plan = plan_up(changed, facts_for(changed, rts, before, hashes={**file_hashes(s, rts), **env_hashes(s, rts)}), UpInputs(rts))
    replaced = {c for (stage, c), a in actions(plan).items() if a == "replace"}
    assert replaced == {"llama2-13b-pd-decode-0"}
    stop = next(step for step in plan.steps if step.stage == "stop")
    assert [c.argv[:2] for c in stop.commands] == [("docker", "stop"), ("docker", "rename")]
    assert stop.commands[-1].argv[-1] == "llama2-13b-pd-decode-0.previous"
    # an old `.previous` left on the host (the facts list it) is removed before the rename
    old = container_fact("id-old", "llama2-13b-pd-decode-0.previous", "exited", "sha256:img", {})
    plan = plan_up(changed, facts_for(changed, rts, before + [old], hashes={**file_hashes(s, rts),
                                                                           **env_hashes(s, rts)}), UpInputs(rts))
    stop = next(step for step in plan.steps if step.stage == "stop")
    assert [c.argv[:2] for c in stop.commands] == [("docker", "rm"), ("docker", "stop"), ("docker", "rename")]
    assert stop.commands[0].argv[-1] == "llama2-13b-pd-decode-0.previous"


def test_exited_container_is_recreated():
    s = spec()
    rts = ranktables(s)
    containers = running(s, rts, **{"llama2-13b-pd-prefill-0": "exited"})
    plan = plan_up(s, facts_for(s, rts, containers, hashes={**file_hashes(s, rts), **env_hashes(s, rts)}), UpInputs(rts))
    assert actions(plan)[("workers", "llama2-13b-pd-prefill-0")] == "replace"
    assert actions(plan)[("workers", "llama2-13b-pd-decode-0")] == "keep"


def test_npu_held_by_someone_else_is_refused_naming_the_holder():
    s = spec()
    rts = ranktables(s)
    stranger = container_fact("x", "someone-elses", "running", "i", {}, (5,))
    with pytest.raises(PlanError, match="NPU 5 .* held by container 'someone-elses'"):
        plan_up(s, facts_for(s, rts, [stranger]), UpInputs(rts))


def test_container_no_longer_in_spec_is_retired_and_strangers_untouched():
    s = spec()
    rts = ranktables(s)
    stray = container_fact("y", "llama2-13b-pd-decode-1", "running", "i", {LABEL_DEPLOYMENT: s.name})
    other = container_fact("z", "other-app", "running", "i", {LABEL_DEPLOYMENT: "other"})
    plan = plan_up(s, facts_for(s, rts, running(s, rts) + [stray, other]), UpInputs(rts))
    assert actions(plan)[("stop", "llama2-13b-pd-decode-1")] == "remove"
    assert not any(step.container == "other-app" for step in plan.steps)
    down = plan_down(s, facts_for(s, rts, running(s, rts) + [stray, other]))
    assert {step.container for step in down.steps if step.stage == "down"} == (
        {i.name for i in s.instances} | {"llama2-13b-pd-decode-1"})


def test_missing_image_is_pulled_and_plan_json_has_argv():
    s = spec()
    rts = ranktables(s)
    plan = plan_up(s, {"node1": deployed((), None, {})}, UpInputs(rts))
    (image,) = next(stage for stage in plan.stages if stage.name == "image").steps
    assert image.commands[0].argv == ("docker", "pull", "deployctl/vllm-ascend:6.3.909")
    document = plan.to_json()
    assert document["deployment"] == "llama2-13b-pd"
    assert any(entry["argv"][:2] == ["docker", "run"] for entry in document["steps"])
    assert "hf_sekrit_value" not in str(document)


def test_a_changed_global_ranktable_replaces_every_pd_container():
    s = spec()
    rts = ranktables(s)
    hashes = {**file_hashes(s, rts), **env_hashes(s, rts)}
    moved = RanktableFiles(rts.global_name, rts.local_names,
                           {**rts.contents, rts.global_name: b'{"an instance moved": true}'})
    plan = plan_up(s, facts_for(s, moved, running(s, rts), hashes=hashes), UpInputs(moved))
    replaced = {c for (stage, c), a in actions(plan).items() if a == "replace" and stage != "stop"}
    assert replaced == {i.name for i in s.instances}
    files = next(stage for stage in plan.stages if stage.name == "files").steps[0]
    assert [p.path for p in files.puts] == [f"/var/lib/deployctl/{s.name}/ranktables/{rts.global_name}"]


def test_leftover_previous_is_removed_once_never_beside_its_own_replacement():
    s = spec()
    rts = ranktables(s)
    hashes = {**file_hashes(s, rts), **env_hashes(s, rts)}
    leftovers = [container_fact(f"p{n}", f"{i.name}.previous", "exited", "i", {LABEL_DEPLOYMENT: s.name})
                 for n, i in enumerate(s.instances)]
    containers = running(s, rts, **{"llama2-13b-pd-prefill-0": "exited"}) + leftovers
    plan = plan_up(s, facts_for(s, rts, containers, hashes=hashes), UpInputs(rts))
    stop = [(step.container, step.action) for step in plan.steps if step.stage == "stop"]
    assert ("llama2-13b-pd-prefill-0", "replace") in stop
    assert ("llama2-13b-pd-prefill-0.previous", "remove") not in stop  # the replace step removes it first
    assert ("llama2-13b-pd-decode-0.previous", "remove") in stop


def test_checks_come_first_when_anything_changes_and_never_for_a_rerun_or_when_skipped():
    s = spec()
    rts = ranktables(s)
    fresh = plan_up(s, facts_for(s, rts, []), UpInputs(rts))
    (check,) = fresh.stages[0].steps
    assert (fresh.stages[0].name, check.host, check.action, check.changes) == ("checks", "node1", "check", False)
    assert "checks" not in [st.name for st in plan_up(s, facts_for(s, rts, []), UpInputs(rts),
                                                      skip=frozenset({"checks"})).stages]
    hashes = {**file_hashes(s, rts), **env_hashes(s, rts)}
    rerun = plan_up(s, facts_for(s, rts, running(s, rts), hashes=hashes), UpInputs(rts))
    assert not rerun.changed and "checks" not in [st.name for st in rerun.stages]


def test_env_file_of_a_retired_container_is_removed_with_its_secret():
    s = spec()
    rts = ranktables(s)
    stale = "/var/lib/deployctl/llama2-13b-pd/env/llama2-13b-pd-decode-1.env"
    hashes = {**file_hashes(s, rts), **env_hashes(s, rts), stale: "0" * 64}
    plan = plan_up(s, facts_for(s, rts, running(s, rts), hashes=hashes), UpInputs(rts))
    (files,) = next(stage for stage in plan.stages if stage.name == "files").steps
    assert (files.action, files.puts) == ("remove", ())
    assert [c.argv for c in files.commands] == [("rm", "-f", "--", stale)]
    assert "1 stale env file(s) to remove" in files.reason
    assert not plan_up(s, facts_for(s, rts, running(s, rts), hashes={**file_hashes(s, rts), **env_hashes(s, rts)}),
                       UpInputs(rts)).changed  # once removed, a re-run is a no-op


def test_a_rolled_back_up_removes_the_env_files_it_wrote_and_nothing_else():
    s = spec()
    rts = ranktables(s)
    plan = plan_up(s, facts_for(s, rts, []), UpInputs(rts))
    (files,) = next(stage for stage in plan.stages if stage.name == "files").steps
    env_files = [p.path for p in files.puts if p.mode == 0o600]
    assert env_files and all("/env/" in p for p in env_files)
    assert [c.argv for c in files.undo] == [("rm", "-f", "--", *env_files)]  # the ranktables stay
