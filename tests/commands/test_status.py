"""`status`'s weights line: one host is synced or not, never "differing"; hosts differ only when two hold digests.
With nothing deployed it says "not deployed" and exits 3; a partly deployed deployment keeps its table, exit 0."""

from __future__ import annotations

import contextlib
import json
import textwrap

import pytest

from deployctl.cli import main
from deployctl.commands.status import weights_line
from deployctl.plan.containers import LABEL_DEPLOYMENT
from tests.plan.hostfacts import deployed
from tests.plan.test_up import container_fact

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def test_one_host_synced_says_synced_on_that_host():
    assert weights_line({"identical": True, "hosts": {"tb1": A}}) == f"weights: synced on tb1 ({A[:19]})"


def test_one_host_without_manifest_is_not_synced_and_does_not_differ():
    line = weights_line({"identical": False, "hosts": {"tb1": None}})
    assert "not synced on tb1" in line and "differ" not in line and "weights sync" in line


def test_several_hosts_identical():
    assert weights_line({"identical": True, "hosts": {"tb1": A, "tb2": A}}) == \
        f"weights: identical on every host ({A[:19]})"


def test_one_of_two_hosts_missing_is_named_without_differ():
    line = weights_line({"identical": False, "hosts": {"tb1": A, "tb2": None}})
    assert "not synced on tb2" in line and "tb1" not in line and "differ" not in line


def test_two_digests_differ_and_a_third_host_missing():
    line = weights_line({"identical": False, "hosts": {"tb1": A, "tb2": B, "tb3": None}})
    assert "not synced on tb3" in line
    assert f"weights differ between hosts — tb1: {A[:19]}, tb2: {B[:19]}" in line

SPEC = textwrap.dedent("""\
    version: 1
    name: demo
    hosts:
      a: {address: 192.0.2.1}
      b: {address: 192.0.2.2}
    image: {name: img}
    model: {served_name: m, max_model_len: 4096, max_num_seqs: 16, max_num_batched_tokens: 4096}
    topology:
      mode: mixed
      instances:
        - {host: a, devices: [0], port: 8000}
        - {host: b, devices: [0], port: 8000}
    """)


@pytest.fixture
def status_of(tmp_path, monkeypatch, capsys):
    """Run `deployctl status` against hosts whose containers are `containers` (host -> list); no network."""
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)

    def run(containers: dict, *flags: str):
        monkeypatch.setattr("deployctl.hosts.connected", lambda spec, **_: contextlib.nullcontext({}))
        monkeypatch.setattr("deployctl.gather.gather_state",
                            lambda spec, transports, **_: {h: deployed(containers.get(h, ())) for h in ("a", "b")})
        capsys.readouterr()
        code = main(["status", str(path), *flags])
        return code, *capsys.readouterr()
    return run


def test_nothing_deployed_says_so_and_exits_3(status_of):
    code, out, err = status_of({})
    assert code == 3 and "demo: not deployed" in out and "Traceback" not in err
    code, out, err = status_of({}, "--output", "json")
    doc = json.loads(out)
    assert code == 3 and doc["deployed"] is False
    assert [(i["name"], i["state"]) for i in doc["instances"]] == [("demo-mixed-0", "missing"), ("demo-mixed-1", "missing")]


def test_a_partly_deployed_deployment_keeps_its_table_with_missing_rows_and_exits_0(status_of):
    exited = container_fact("c1", "demo-mixed-1", "exited", "sha256:i", {LABEL_DEPLOYMENT: "demo"})
    code, out, err = status_of({"b": [exited]}, "--output", "json")
    doc = json.loads(out)
    assert code == 0 and doc["deployed"] is True
    assert [(i["name"], i["state"]) for i in doc["instances"]] == [("demo-mixed-0", "missing"), ("demo-mixed-1", "exited")]
    code, out, err = status_of({"b": [exited]})
    assert code == 0 and "not deployed" not in out and "demo-mixed-0" in out and "missing" in out


def test_a_previous_container_alone_is_not_a_deployment(status_of):
    previous = container_fact("p", "demo-mixed-0.previous", "exited", "sha256:i", {LABEL_DEPLOYMENT: "demo"})
    assert status_of({"a": [previous]})[0] == 3


SOUND = {"action": "up", "result": "ok", "time": "2026-11-28T10:00:00Z",
         "time_to_serve": {"wall_s": 10.0, "phases": {"container_start": 4.0, "server_ready": 6.0},
                           "hosts": {"a": [{"phase": "container_start", "start_s": 0.0, "seconds": 4.0,
                                            "instance": "demo-mixed-0"},
                                           {"phase": "server_ready", "start_s": 4.0, "seconds": 6.0}]}}}


def damaged(path: str, value) -> dict:
    """SOUND with one value replaced (`path`: dotted, list indexes as numbers)."""
    record = json.loads(json.dumps(SOUND))
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = record
    for key in parents:
        target = target[key]
    target[last] = value
    return record


@pytest.fixture
def timeline_of(tmp_path, monkeypatch, capsys):
    """`deployctl status --timeline` over a first host whose history.jsonl holds `lines` (written as JSON)."""
    from types import SimpleNamespace

    from deployctl.transport import Result

    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)

    def run(lines, *flags: str):
        text = "".join(json.dumps(line) + "\n" for line in lines)
        host = SimpleNamespace(run=lambda command, timeout=None: Result(command.argv, 0, text, ""))
        monkeypatch.setattr("deployctl.hosts.connected", lambda spec, **_: contextlib.nullcontext({"a": host}))
        capsys.readouterr()
        code = main(["status", str(path), "--timeline", *flags])
        return code, *capsys.readouterr()
    return run


@pytest.mark.parametrize("where, value", [
    ("time_to_serve.wall_s", float("nan")), ("time_to_serve.wall_s", 1e300), ("time_to_serve.wall_s", "10.0"),
    ("time_to_serve.hosts.a.1.start_s", 1e18), ("time_to_serve.hosts.a.0.seconds", "4"),
    ("time_to_serve.phases.server_ready", float("inf")), ("time_to_serve.hosts.a", {"phase": "x"}),
    ("time_to_serve.hosts.a.0.instance", ["[bold]x"]), ("time_to_serve.wall_s", True),
])
def test_a_damaged_ledger_in_the_history_is_refused_with_a_message_and_the_sound_one_drawn(timeline_of, where,
                                                                                             value):
    code, out, err = timeline_of([SOUND, damaged(where, value)])
    assert code == 0 and "Traceback" not in err
    assert "demo: time to serve 10.0 s" in out  # the older, sound record
    assert "history line 2 of the last 2: " in err and "not drawn" in err
    code, out, err = timeline_of([damaged(where, value)], "--output", "json")
    doc = json.loads(out)
    assert code == 3 and doc["up"] is None and doc["skipped"][0].startswith("history line 1 of the last 1: ")


def test_the_timeline_shows_a_hosts_words_never_reads_them_as_markup(timeline_of):
    code, out, err = timeline_of([damaged("time_to_serve.hosts.a.0.instance", "[red]x[/red] [/]")])
    assert code == 0 and "[red]x[/red] [/]" in out and "Traceback" not in err


def test_the_timeline_is_the_newest_up_that_changed_something_and_says_so(timeline_of):
    """The quick start's `up` re-run (it changed nothing) came right before `status --timeline`, which drew that
    no-op instead of the demo's deploy its comment promises."""
    deploy = {**SOUND, "changed": True}
    rerun = {**damaged("time_to_serve.wall_s", 10.0), "changed": False, "time": "2026-11-28T10:05:00Z"}
    rerun["time_to_serve"] = {"wall_s": 0.5, "phases": {"plan": 0.5}, "hosts": {}}
    code, out, err = timeline_of([deploy, rerun, rerun])
    assert code == 0 and "demo: time to serve 10.0 s (2026-11-28T10:00:00Z, ok)" in out
    assert "the newest `up` that changed something; 2 later `up`(s) changed nothing and are not drawn" in out
    code, out, _ = timeline_of([deploy, rerun], "--output", "json")
    assert json.loads(out)["up"]["time"] == "2026-11-28T10:00:00Z" and json.loads(out)["up"]["passed_over"] == 1
    code, out, _ = timeline_of([rerun])  # nothing ever deployed: the no-op is drawn, and said to be one
    assert code == 0 and "time to serve 0.5 s" in out and "this `up` changed nothing" in out
