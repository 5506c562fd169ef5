"""The ledger recorder keeps each step's times from the executor's events and passes every event on."""

import json

from deployctl.execute.ledger import LedgerRecorder
from deployctl.lock import last_time_to_serve
from deployctl.plan.model import Step


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_spans_from_start_and_done_events_and_events_passed_on():
    clock, seen = Clock(), []
    recorder = LedgerRecorder(0.0, clock)
    on_event = recorder.wrap(lambda kind, step, message: seen.append(kind))
    build = Step("tb1", "image", "run")  # a pull: no Build action
    worker = Step("tb1", "workers", "create", container="d-mixed-0")
    clock.now = 1.0
    on_event("start", build, "")
    clock.now = 2.0
    on_event("done", build, "")
    on_event("start", worker, "")
    on_event("progress", worker, "waiting")
    clock.now = 5.0
    on_event("failed", worker, "boom")
    assert seen == ["start", "done", "start", "progress", "failed"]
    assert [(s.stage, s.start, s.end, s.container) for s in recorder.spans] == [
        ("image", 1.0, 2.0, None), ("workers", 2.0, 5.0, "d-mixed-0")]
    clock.now = 6.0
    ledger = recorder.ledger({}, {"d-mixed-0": "tb1"})
    assert ledger.wall == 6.0 and sum(ledger.phases.values()) == 6.0
    assert ledger.phases["image_pull"] == 1.0 and ledger.phases["container_start"] == 3.0


def test_the_history_keeps_the_newest_up_with_a_ledger():
    lines = [{"action": "up", "result": "ok", "time_to_serve": {"wall_s": 1.0}},
             {"action": "down", "result": "ok"},
             {"action": "up", "result": "ok", "time_to_serve": {"wall_s": 2.0}},
             {"action": "up", "result": "failed"}]
    text = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n"
    assert last_time_to_serve(text)["time_to_serve"]["wall_s"] == 2.0
    assert last_time_to_serve("") is None


def test_the_ledger_says_how_each_host_got_its_compile_cache_and_what_the_controller_carried():
    from deployctl.execute.executor import Report, StepOutcome

    recorder = LedgerRecorder(0.0, Clock())
    give = StepOutcome(Step("tb1", "cache", "run"), "done",
                       copies={"tb2": {"key": "k", "from": "tb1", "seconds": 1.0, "bytes": 100, "via": "peer"},
                               "tb3": {"key": "k", "from": "tb1", "seconds": 2.0, "bytes": 100, "via": "controller"}})
    recorder.note(Report([StepOutcome(Step("tb2", "cache", "run"), "done"), give]))
    copies = recorder.ledger({}, {}).to_json()["compile_cache"]
    assert {host: c["via"] for host, c in copies["hosts"].items()} == {"tb2": "peer", "tb3": "controller"}
    assert copies["controller_bytes"] == 100
    assert "compile_cache" not in LedgerRecorder(0.0, Clock()).ledger({}, {}).to_json()  # nothing copied


def test_the_new_servers_start_up_logs_are_read_in_one_probe_per_host(tmp_path, monkeypatch):
    """read_milestones asks each host once (the startup_log probe, through the probe layer) for the servers this
    `up` started, and parses them with the server profile's lines."""
    from deployctl.execute.ledger import read_milestones
    from deployctl.plan.ledger import StepSpan
    from deployctl.spec.load import load_spec_text
    from deployctl.transport.local import LocalTransport
    from tests.plan.test_compile_cache import TWO_HOSTS

    calls = tmp_path / "calls"
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nif [ "$1" = inspect ]; then echo 2026-11-25T10:00:00Z; '
                    'else echo "2026-11-25T10:00:07.5Z INFO Loading weights took 6.1 seconds"; '
                    'echo "2026-11-25T10:00:09Z INFO Application startup complete."; fi\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    spec = load_spec_text(TWO_HOSTS)
    spans = [StepSpan("workers", "h2", 0.0, 1.0, "cc-mixed-1"), StepSpan("workers", "h2", 0.0, 1.0, "cc-mixed-2"),
             StepSpan("files", "h1", 0.0, 1.0)]
    found = read_milestones(spec, {"h1": LocalTransport("h1"), "h2": LocalTransport("h2")}, spans)
    assert set(found) == {"cc-mixed-1", "cc-mixed-2"}
    assert found["cc-mixed-1"].ended["weights_loaded"] - found["cc-mixed-1"].started == 7.5
    assert found["cc-mixed-1"].ended["server_ready"] - found["cc-mixed-1"].started == 9.0
    assert sum(1 for line in calls.read_text().splitlines() if line.startswith("logs")) == 2  # h1 asked nothing
