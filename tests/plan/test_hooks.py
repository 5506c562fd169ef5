"""The hooks planned as data (plan/hooks.py): where each point goes in `up`'s and `down`'s plans, on which host,
with which facts; a plan that changes nothing runs none; `--skip hooks` leaves them out; secrets stay Secrets."""

from __future__ import annotations

from deployctl.core import Secret
from deployctl.plan.actions import RunHook
from deployctl.plan.down import plan_down
from deployctl.plan.hooks import after_failure, split
from deployctl.plan.model import CONTROL_HOST
from deployctl.plan.up import UpInputs, plan_up
from deployctl.spec.load import load_spec_text
from tests.plan.hostfacts import deployed, running
from tests.spec.test_front_rules import MIXED, ROUTER

HOOKS = """hooks:
  pre_up: {command: [./announce.sh, starting], env: {TOKEN: "${HOOK_TOKEN}", CHANNEL: ops}}
  post_up: {command: [./smoke.sh], timeout: 60}
  pre_wave: {command: [./lb, drain], on: hosts}
  post_wave: {command: [./lb, enable]}
  on_failure: {command: [./page, oncall]}
  pre_down: {command: [./deregister]}
  post_down: {command: [./notify, gone]}
"""
ENV = {"HOOK_TOKEN": "s3cr3t-token-value"}
FRESH = {"tb1": deployed((), "sha256:img")}  # the image there, no container yet


def mixed(seqs=8, extra=HOOKS):
    return load_spec_text((MIXED % ROUTER).replace("max_num_seqs: 8", f"max_num_seqs: {seqs}") + extra, environ=ENV)


def hooks_of(plan):
    return [(s.hook, s.wave, tuple(st.host for st in s.steps)) for s in plan.stages if s.hook]


def test_a_fresh_up_runs_pre_up_first_post_up_last_and_keeps_on_failure_aside():
    spec = mixed()
    plan = plan_up(spec, FRESH, UpInputs())
    assert plan.stages[0].hook == "pre_up" and plan.stages[-1].hook == "post_up"
    assert hooks_of(plan) == [("pre_up", 0, (CONTROL_HOST,)), ("post_up", 0, (CONTROL_HOST,))]  # no waves: nothing ran
    assert [s.hook for s in plan.on_failure] == ["on_failure"]
    (hook,) = plan.stages[0].steps[0].actions
    assert isinstance(hook, RunHook) and hook.argv == ("./announce.sh", "starting") and hook.timeout == 300
    env = {v.name: v.value for v in hook.env}
    assert env["TOKEN"] == Secret("s3cr3t-token-value") and env["CHANNEL"] == "ops"
    assert env["DEPLOYCTL_DEPLOYMENT"] == "mix2" and env["DEPLOYCTL_HOOK"] == "pre_up"
    assert env["DEPLOYCTL_ACTION"] == "up" and env["DEPLOYCTL_HOSTS"] == "tb1"
    assert env["DEPLOYCTL_INSTANCES"] == "mix2-mixed-0 mix2-mixed-1 mix2-router"
    assert env["DEPLOYCTL_ENDPOINTS"].split()[0] == "mix2-mixed-0=http://10.200.0.11:9001"
    assert env["DEPLOYCTL_ENDPOINT"] == "http://10.200.0.11:8000" and "DEPLOYCTL_RESULT" not in env
    post = {v.name: v.value for v in plan.stages[-1].steps[0].actions[0].env}
    assert post["DEPLOYCTL_RESULT"] == "ok" and plan.stages[-1].steps[0].actions[0].timeout == 60


def test_the_plan_shows_every_hook_in_order_and_no_secret():
    plan = plan_up(mixed(), FRESH, UpInputs())
    doc = plan.to_json()
    hooks = [(e["hook"], e["argv"]) for e in doc["steps"] if e.get("type") == "hook"]
    assert hooks == [("pre_up", ["./announce.sh", "starting"]), ("post_up", ["./smoke.sh"])]
    assert doc["on_failure"][0]["hook"] == "on_failure" and doc["on_failure"][0]["argv"] == ["./page", "oncall"]
    assert doc["steps"][0]["env"]["TOKEN"] == "${HOOK_TOKEN}"
    assert "s3cr3t-token-value" not in repr(doc) and "s3cr3t-token-value" not in plan.stages[0].steps[0].actions[0].display()


def test_each_drain_wave_gets_pre_wave_before_it_changes_anything_and_post_wave_once_it_is_committed():
    before = mixed()
    plan = plan_up(mixed(seqs=16), running(before), UpInputs())
    names = [(s.hook or s.name, s.wave) for s in plan.stages if s.steps]
    for wave in (1, 2):
        pre, post = names.index(("pre_wave", wave)), names.index(("post_wave", wave))
        assert names[pre + 1] == ("drain", wave)  # before the wave takes its server out of the front
        assert names[post - 1] == ("route", wave) and plan.stages[[s.hook or s.name for s in plan.stages].index(
            "route")].commit  # after the wave's commit
    pre_wave = next(s for s in plan.stages if s.hook == "pre_wave" and s.wave == 2)
    assert [st.host for st in pre_wave.steps] == ["tb1"]  # on: hosts: every host of the spec
    env = {v.name: v.value for v in pre_wave.steps[0].actions[0].env}
    assert env["DEPLOYCTL_WAVE"] == "2" and env["DEPLOYCTL_WAVES"] == "2" and env["DEPLOYCTL_HOST"] == "tb1"
    assert env["DEPLOYCTL_WAVE_INSTANCES"] == "mix2-mixed-1"
    pre, body, post = split(plan)
    assert [s.hook for s in pre.stages] == ["pre_up"] and [s.hook for s in post.stages] == ["post_up"]
    assert "pre_wave" in [s.hook for s in body.stages] and not body.stages[0].hook and not pre.on_failure


def test_a_plan_that_changes_nothing_runs_no_hook_and_skip_hooks_leaves_them_out():
    spec = mixed()
    assert not plan_up(spec, running(spec), UpInputs()).changed
    assert not hooks_of(plan_up(spec, running(spec), UpInputs()))
    skipped = plan_up(mixed(seqs=16), running(spec), UpInputs(), skip=frozenset({"hooks"}))
    assert skipped.changed and not hooks_of(skipped) and not skipped.on_failure


def test_down_runs_pre_down_before_anything_is_removed_and_post_down_after():
    spec = mixed()
    plan = plan_down(spec, running(spec))
    assert [s.hook or s.name for s in plan.stages] == ["pre_down", "down", "files", "post_down"]
    assert {v.name: v.value for v in plan.stages[0].steps[0].actions[0].env}["DEPLOYCTL_ACTION"] == "down"
    assert [s.name for s in plan_down(spec, running(spec), skip=frozenset({"hooks"})).stages] == ["down", "files"]


def test_on_failure_is_told_the_result_and_the_error():
    plan = plan_up(mixed(), FRESH, UpInputs())
    told = after_failure(plan, "rolled back", "tb1: mix2-mixed-0 exited")
    (hook,) = told.stages[0].steps[0].actions
    env = {v.name: v.value for v in hook.env}
    assert env["DEPLOYCTL_RESULT"] == "rolled back" and env["DEPLOYCTL_ERROR"] == "tb1: mix2-mixed-0 exited"
    assert [v.name for v in hook.env].count("DEPLOYCTL_RESULT") == 1
