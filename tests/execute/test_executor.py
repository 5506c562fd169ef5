"""execute: stages in order, a failure undoes what ran (in reverse), a no-op runs nothing, secrets stay hidden."""

from deployctl.execute import Executor
from deployctl.core import Command, Secret
from deployctl.plan.model import HealthCheck, Plan, PutFile, Stage, Step
from deployctl.transport import Result
from tests.fakes.transport import FakeTransport


def step(host, stage, action, *argv, undo=(), health=None, container=None):
    return Step(host, stage, action, commands=tuple(Command(a) for a in argv),
                undo=tuple(Command(a) for a in undo), health=health, container=container)


def test_keep_only_plan_runs_nothing():
    fake = FakeTransport("h1")
    report = Executor({"h1": fake}).execute(Plan("d", (Stage("workers", (Step("h1", "workers", "keep"),)),)))
    assert fake.ran == [] and report.executed == 0 and not report.failed


def test_failure_stops_later_stages_and_undoes_in_reverse():
    fake = FakeTransport("h1", {("docker", "run", "bad"): Result(("x",), 125, "", "no such device")})
    plan = Plan("d", (
        Stage("stop", (step("h1", "stop", "replace", ("docker", "stop", "a"), undo=[("docker", "start", "a")]),)),
        Stage("workers", (step("h1", "workers", "create", ("docker", "run", "bad"), undo=[("docker", "rm", "b")]),)),
        Stage("scheduler", (step("h1", "scheduler", "create", ("docker", "run", "sched")),)),
    ))
    report = Executor({"h1": fake}).execute(plan)
    ran = [c.argv for c in fake.ran]
    assert ("docker", "run", "sched") not in ran
    assert ran[-2:] == [("docker", "rm", "b"), ("docker", "start", "a")]
    assert report.failed and report.rolled_back
    assert "no such device" in report.error.stderr_tail


def test_container_that_exits_while_starting_fails_at_once_with_its_log():
    fake = FakeTransport("h1", {"inspect": "exited 1\n000\nstandin: refusing to start: no config.json\n",
                                "logs --tail 20": "standin: refusing to start: no config.json\n"})
    plan = Plan("d", (Stage("workers", (step("h1", "workers", "create", ("docker", "run", "x"),
                                             health=HealthCheck("c", 8080), container="c"),)),))
    report = Executor({"h1": fake}, health_timeout=5, poll_interval=0.01).execute(plan)
    assert report.failed and "exited while starting" in report.error.message
    assert "no config.json" in report.error.stderr_tail


def test_healthy_container_passes_and_secrets_are_put_not_printed():
    fake = FakeTransport("h1", {"inspect": "running 0\n200\nready\n"})
    events = []
    put = PutFile("/var/lib/x.env", Secret(b"TOKEN=sekrit\n"), 0o600)
    plan = Plan("d", (Stage("workers", (Step("h1", "workers", "create", puts=(put,),
                                             commands=(Command(("docker", "run", "x")),),
                                             health=HealthCheck("c", 8080), container="c"),)),))
    report = Executor({"h1": fake}, on_event=lambda *e: events.append(e)).execute(plan)
    assert not report.failed
    assert fake.files["/var/lib/x.env"] == (b"TOKEN=sekrit\n", 0o600)
    assert "sekrit" not in repr(events) + repr(plan) + repr(put.display())


def test_a_failed_step_stops_its_siblings_health_waits_at_once():
    # h2's container never gets healthy (a DP rank whose master died); h1's exits: the stage fails now,
    # not after h2's health timeout, and both are rolled back
    h1 = FakeTransport("h1", {"inspect": "exited 1\n000\nstandin: refusing to start: kv port 30000 in use\n"})
    h2 = FakeTransport("h2", {"inspect": "running 0\n000\nwaiting for the master\n"})
    plan = Plan("d", (Stage("workers", (
        step("h1", "workers", "create", ("docker", "run", "r0"), undo=[("docker", "rm", "r0")],
             health=HealthCheck("r0", 9300), container="r0"),
        step("h2", "workers", "create", ("docker", "run", "r1"), undo=[("docker", "rm", "r1")],
             health=HealthCheck("r1", 9301), container="r1"),
    )),))
    events = []
    report = Executor({"h1": h1, "h2": h2}, health_timeout=3600, poll_interval=0.01,
                      on_event=lambda *e: events.append(e)).execute(plan)
    assert report.failed and report.rolled_back and "r0 exited while starting" in report.error.message
    assert ("failed", "stopped: another step of this stage failed") in [(k, m) for k, s, m in events if s.host == "h2"]
    assert ("docker", "rm", "r1") in [c.argv for c in h2.ran]


def _health_of(container, answers):
    """A health poll's answers for `container`, one per poll (the last one repeats); other polls answer 200."""
    polls = []

    def respond(command):
        if command.argv[4] != container:
            return Result(command.argv, 0, "running 0\n200\nready\n", "")
        polls.append(command)
        return Result(command.argv, 0, answers[min(len(polls), len(answers)) - 1], "")
    return polls, respond


def _replace_then_fail_plan():
    """`a` replaced (stopped, renamed; its undo restores it and waits on its health), then `b` fails to start."""
    stop = Step("h1", "stop", "replace", container="a", commands=(Command(("docker", "stop", "a")),),
                undo=(Command(("docker", "rename", "a.previous", "a")), Command(("docker", "start", "a"))),
                undo_health=HealthCheck("a", 8080))
    return Plan("d", (Stage("stop", (stop,)),
                      Stage("workers", (step("h1", "workers", "create", ("docker", "run", "bad"),
                                             undo=[("docker", "rm", "b")], container="b"),))))


def test_rollback_ends_only_once_the_restored_container_serves_again():
    loading = "running 0\n000\nloading weights\n"
    polls, respond = _health_of("a", [loading, loading, "running 0\n200\nready\n"])
    fake = FakeTransport("h1", {("docker", "run", "bad"): Result(("x",), 125, "", "no such device"),
                                "inspect": respond})
    events = []
    report = Executor({"h1": fake}, poll_interval=0.001, on_event=lambda *e: events.append(e)).execute(
        _replace_then_fail_plan())
    assert report.failed and report.rolled_back and "no such device" in report.error.stderr_tail
    # polled after `docker start a` until it answered 200, and not once more
    assert len(polls) == 3
    assert fake.ran.index(polls[0]) > [c.argv for c in fake.ran].index(("docker", "start", "a"))
    assert fake.ran[-1] is polls[-1]
    assert report.not_restored == [] and not any("restored, but" in m for _, _, m in events)


def test_a_restored_container_that_never_serves_again_is_reported():
    polls, respond = _health_of("a", ["exited 1\n000\nout of memory\n"])
    fake = FakeTransport("h1", {("docker", "run", "bad"): Result(("x",), 125, "", "no such device"),
                                "inspect": respond, "logs --tail 20": "out of memory\n"})
    events = []
    report = Executor({"h1": fake}, poll_interval=0.001, on_event=lambda *e: events.append(e)).execute(
        _replace_then_fail_plan())
    assert len(polls) == 1
    assert "no such device" in report.error.stderr_tail  # the deploy's own error stays the one to see
    assert report.not_restored == ["h1 (fake): a exited while starting"]
    assert ("failed", "a", "restored, but h1 (fake): a exited while starting") in [(k, s.container, m) for k, s, m in events]


def test_the_rollback_report_says_when_a_restored_container_does_not_serve(capsys):
    from deployctl.execute.executor import Report
    from deployctl.ui import UI, render_report

    report = Report([], failed=True, rolled_back=True, not_restored=["h1 (10.0.0.1): a exited while starting"])
    render_report(UI(color=False), report)
    err = capsys.readouterr().err
    assert "not whole" in err and "h1 (10.0.0.1): a exited while starting" in err
    assert "the previous containers run again" not in err
