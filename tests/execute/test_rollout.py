"""The executor runs drain waves: a drain waits on /metrics, a finished wave is kept, a failed wave is rolled back
(old container restored, then put back into the front) and the report says which waves were done."""

from __future__ import annotations

import pytest

from deployctl.core import Command
from deployctl.errors import HostError, RolloutFailed
from deployctl.execute import Executor
from deployctl.facts.progress import MARK
from deployctl.plan.actions import Drain
from deployctl.plan.model import HealthCheck, Plan, Stage, Step
from deployctl.transport import Result
from tests.fakes.transport import FakeTransport

METRICS = MARK + " http://h:1/metrics\nvllm:num_requests_running {}\nvllm:num_requests_waiting {}\n"


def wave(n: int, fail_start: bool = False) -> tuple[Stage, ...]:
    c = f"w{n}"
    drain = Step("h", "drain", "drain", commands=(Command(("curl", "remove", c)),),
                 actions=(Drain((("s", "http://h:1/metrics"),), 30),), late_undo=(Command(("curl", "add", c)),),
                 wave=n)
    stop = Step("h", "stop", "replace", container=c, commands=(Command(("docker", "stop", c)),),
                undo=(Command(("docker", "rename", f"{c}.previous", c)),), undo_health=HealthCheck(c, 1),
                finalize=(Command(("docker", "rm", f"{c}.previous")),), wave=n)
    start = Step("h", "workers", "replace", container=c,
                 commands=(Command(("docker", "run", "bad" if fail_start else c)),),
                 undo=(Command(("docker", "rm", c)),), wave=n)
    route = Step("h", "route", "add", commands=(Command(("curl", "add", c)),), wave=n)
    return (Stage("drain", (drain,), wave=n), Stage("stop", (stop,), wave=n), Stage("workers", (start,), wave=n),
            Stage("route", (route,), wave=n, commit=True))


def test_a_drain_waits_until_nothing_runs_then_the_wave_goes_on():
    answers = iter([METRICS.format(2, 1), METRICS.format(1, 0), METRICS.format(0, 0)])
    fake = FakeTransport("h", {"for u": lambda c: Result(c.argv, 0, next(answers), "")})
    report = Executor({"h": fake}, poll_interval=0.001).execute(Plan("d", wave(1)))
    ran = [c.argv for c in fake.ran]
    polls = [i for i, argv in enumerate(ran) if argv[0] == "sh"]
    assert len(polls) == 3 and ran.index(("curl", "remove", "w1")) < polls[0] < ran.index(("docker", "stop", "w1"))
    assert not report.failed and report.waves_done == [1] and report.drain_left == []


def test_a_drain_that_times_out_says_what_remained_and_stops_gracefully_anyway():
    fake = FakeTransport("h", {"for u": METRICS.format(3, 1)})
    events = []
    plan = Plan("d", tuple(Stage(s.name, tuple(Step(**{**st.__dict__, "actions": (Drain(st.actions[0].servers, 0),)})
                                               if st.actions else st for st in s.steps), wave=s.wave, commit=s.commit)
                           for s in wave(1)))
    executor = Executor({"h": fake}, on_event=lambda *e: events.append(e))
    report = executor.execute(plan)
    assert report.drain_left == ["wave 1: still in flight after 0 s, stopped gracefully: s: 4 request(s)"]
    assert any(kind == "warning" and "s: 4 request(s)" in message for kind, _, message in events)
    assert ("docker", "stop", "w1") in [c.argv for c in fake.ran] and not report.failed
    # the same executor's next run reports its own drains only
    fake.responses["for u"] = METRICS.format(0, 0)
    assert executor.execute(plan).drain_left == []


def test_a_failed_wave_is_rolled_back_and_put_back_after_it_serves_the_done_wave_stays():
    fake = FakeTransport("h", {"for u": METRICS.format(0, 0), "inspect": "running 0\n200\n\n",
                               ("docker", "run", "bad"): Result(("x",), 125, "", "no such device")})
    report = Executor({"h": fake}, poll_interval=0.001).execute(Plan("d", wave(1) + wave(2, fail_start=True)))
    ran = [c.argv for c in fake.ran]
    assert report.failed and report.waves == 2 and report.waves_done == [1] and report.wave_failed == 2
    assert ("docker", "rm", "w1.previous") in ran  # wave 1 committed: its old container is gone for good
    assert ("docker", "rm", "w1") not in ran and ("docker", "rename", "w1.previous", "w1") not in ran
    restore = ran.index(("docker", "rename", "w2.previous", "w2"))
    served = next(i for i, argv in enumerate(ran) if i > restore and argv[0] == "sh" and "inspect" in argv[2])
    assert ran.index(("curl", "add", "w2")) > served  # back into the front only once it serves again
    error = RolloutFailed(report.error, report.waves, report.waves_done, report.wave_failed)
    assert error.message.startswith("h: rollout stopped in wave 2 of 2: ")
    assert "waves 1 of 2 done" in error.message and error.rollout == {"waves": 2, "waves_done": [1],
                                                                       "wave_failed": 2}
    assert error.exit_status == 1 and isinstance(error, HostError)


def test_a_wave_waits_until_the_front_lists_what_it_put_back_and_fails_naming_what_it_lacks():
    from deployctl.plan.actions import AwaitListed

    answers = iter(['{"urls": []}', "not json", '{"urls": ["http://h:1"]}'])
    fake = FakeTransport("h", {"list_workers": lambda c: Result(c.argv, 0, next(answers), "")})
    wait = AwaitListed("vllm-router", Command(("curl", "http://127.0.0.1:8000/list_workers")), ("h:1",), 30)
    plan = Plan("d", (Stage("route", (Step("h", "route", "add", actions=(wait,)),)),))
    assert not Executor({"h": fake}, poll_interval=0.001).execute(plan).failed
    assert sum(1 for c in fake.ran if "list_workers" in c.argv[-1]) == 3
    never = FakeTransport("h", {"list_workers": '{"urls": []}'})
    report = Executor({"h": never}, poll_interval=0.001).execute(
        Plan("d", (Stage("route", (Step("h", "route", "add", actions=(AwaitListed(
            "vllm-router", wait.command, ("h:1",), 0),)),)),)))
    assert report.failed and "the vllm-router does not list h:1 0 s after it was put back" in report.error.message


def test_a_committed_waves_finalize_runs_beside_the_next_wave_and_ends_before_execute_returns():
    """Removing wave 1's old container is no reason for wave 2 to wait: its finalize runs in the background (here
    it waits until wave 2 has begun; run in line, it would wait out its whole 10 s first)."""
    import threading

    began = threading.Event()
    finished = []

    def remove_old(command):
        began.wait(10)
        finished.append(began.is_set())
        return Result(command.argv, 0, "", "")

    def take_out(command):
        began.set()
        return Result(command.argv, 0, "", "")

    fake = FakeTransport("h", {"for u": METRICS.format(0, 0), ("docker", "rm", "w1.previous"): remove_old,
                               ("curl", "remove", "w2"): take_out})
    report = Executor({"h": fake}, poll_interval=0.001).execute(Plan("d", wave(1) + wave(2)))
    assert not report.failed and report.waves_done == [1, 2]
    assert finished == [True]  # wave 2 began while wave 1's finalize waited, and execute waited for it


TWO = (MARK + " http://h:1/metrics\nvllm:num_requests_running 1\n" + MARK + " http://h:2/metrics\n"
       "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")


def _timing_out(n: int = 1) -> Plan:
    """wave(n) whose drain has two servers (s1 still holds a request, s2 none) and a deadline of 0 s."""
    servers = (("s1", "http://h:1/metrics"), ("s2", "http://h:2/metrics"))
    return Plan("d", tuple(Stage(s.name, tuple(Step(**{**st.__dict__, "actions": (Drain(servers, 0),)})
                                               if st.actions else st for st in s.steps), wave=s.wave, commit=s.commit)
                           for s in wave(n)))


def test_a_drain_left_over_is_counted_per_server_and_said_through_the_real_ui(capsys):
    """The drain's warning had no style: rich raised in the step's thread, the executor dropped the error, the
    drain step never finished (its wave went on without it) and nothing was said."""
    from deployctl.ui import UI, render_report
    from deployctl.ui.events import up_events

    fake = FakeTransport("h", {"for u": TWO})
    with up_events(UI()) as on_event:
        report = Executor({"h": fake}, on_event=on_event).execute(_timing_out())
    assert not report.failed and report.drain_counts == {"s1": 1.0}
    assert [o.status for o in report.outcomes if o.step.stage == "drain"] == ["committed"]
    assert "warning drain h" in capsys.readouterr().err
    render_report(UI(quiet=True), report)  # with --quiet too: the requests were cut short
    assert capsys.readouterr().err.strip() == ("drain deadline: wave 1: still in flight after 0 s, stopped "
                                               "gracefully: s1: 1 request(s)")


def test_what_a_step_raises_beyond_an_expected_failure_is_rolled_back_and_raised_not_dropped():
    def broken(kind, step, message):
        if kind == "warning":
            raise RuntimeError("a bug in a printer")

    fake = FakeTransport("h", {"for u": TWO})
    with pytest.raises(RuntimeError, match="a bug in a printer"):
        Executor({"h": fake}, on_event=broken).execute(_timing_out())
    assert ("curl", "add", "w1") in [c.argv for c in fake.ran]  # the drained server went back into the front
