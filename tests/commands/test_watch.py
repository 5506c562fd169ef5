"""`deployctl watch`'s edge without hosts: the probe and the restart swapped for recorders. What --once exits with,
what one JSON line per observation and action says, --dry-run restarting nothing, the state kept between two
--once runs, and the loop's period."""

from __future__ import annotations

import argparse
import json

import pytest

from deployctl.commands import watch
from deployctl.facts.liveness import Answer
from deployctl.bench.telemetry import Engine
from deployctl.plan.watch import Observation
from deployctl.spec.load import load_spec_text
from deployctl.ui import UI
from tests.spec.test_upstream_build import QWEN3


def args(**changes):
    base = dict(once=True, dry_run=False, hang_timeout=2.0, health_timeout=60.0, lock_wait=0.0, interval=5.0)
    return argparse.Namespace(**{**base, **changes})


def fleet(spec, t, stalled=(), missing=()):
    """One observation per container: idle, or hung (no token, a queue, the one-token generate timed out)."""
    out = []
    for i in spec.instances:
        if i.name in missing:
            out.append(Observation(i.name, i.host, t, "missing"))
            continue
        hung = i.name in stalled
        out.append(Observation(i.name, i.host, t, "running", f"id-{i.name}",
                               health_code=200 if i.port else None,
                               liveness=Answer(0, 0) if hung else Answer(200, 100) if i.port and i.role != "proxy"
                               else None,
                               engines={"0": Engine("0", running=1.0 if hung else 0.0, waiting=0.0,
                                                    generation_tokens=10.0, prompt_tokens=5.0)}
                               if i.port and i.role != "proxy" else {}))
    return out


class Executed:
    """The edges a restart crosses, recorded: the deploy lock (and the history line it appends as it is released)
    and the executor (the plan it was given). Everything between them and the verdicts is watch's own code."""

    def __init__(self):
        self.plans, self.history = [], []


@pytest.fixture
def executed(monkeypatch):
    from deployctl.execute.executor import Report
    from deployctl.plan.front import reach

    record = Executed()

    class Lock:
        def __init__(self, transport, state_dir, action, wait=0.0):
            self.history = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            record.history.append(self.history)
            return False

    class Executor:
        def __init__(self, transports, on_event=None, health_timeout=None):
            pass

        def execute(self, plan):
            record.plans.append(plan)
            return Report([])

    monkeypatch.setattr("deployctl.lock.DeployLock", Lock)
    monkeypatch.setattr("deployctl.execute.Executor", Executor)
    monkeypatch.setattr(watch, "front_addresses", lambda spec, transports: reach(spec))
    return record


def _stopped(plan) -> list[str]:
    return [c.argv[-1] for s in plan.steps for c in s.commands if c.argv[:2] == ("docker", "stop")]


def run_once(monkeypatch, capsys, spec, state, observations, **changes):
    monkeypatch.setattr(watch, "probe", lambda *a, **k: observations)
    transports = {h.name: None for h in spec.hosts}
    code = watch.watch_once(spec, transports, state, args(**changes), watch.Output(UI(output="json")))
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_stalled_rank_restarts_its_group_and_the_lines_say_it(monkeypatch, capsys, executed):
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()
    code, lines = run_once(monkeypatch, capsys, spec, state, fleet(spec, 0.0, stalled={"qwen3-decode0-r2"}))
    assert code == 0 and executed.plans == [] and len(lines) == len(spec.instances)
    assert {line["verdict"] for line in lines} == {"idle", "suspect", "healthy"}
    code, lines = run_once(monkeypatch, capsys, spec, state, fleet(spec, 5.0, stalled={"qwen3-decode0-r2"}))
    group = [f"qwen3-decode0-r{r}" for r in range(8)]
    assert code == 0 and [_stopped(p) for p in executed.plans] == [group]
    verdicts = {line["instance"]: line["verdict"] for line in lines if line["type"] == "observation"}
    assert verdicts["qwen3-decode0-r2"] == "stalled" and verdicts["qwen3-decode0-r3"] == "idle"
    restarting, action = lines[-2:]
    assert (restarting["result"], action["type"], action["unit"], action["result"]) == (
        "restarting", "action", "decode0", "ok")
    assert action["containers"] == group
    (history,) = executed.history
    assert (history["action"], history["unit"], history["result"]) == ("watch restart", "decode0", "ok")
    assert history["reason"].startswith("qwen3-decode0-r2: stalled: ")
    assert all(state.restarted[name] > 0 for name in group)  # its start-up grace runs from now


def test_dry_run_restarts_nothing_and_exits_3_missing_containers_exit_3(monkeypatch, capsys, executed):
    """The real dry-run branch of `act`: the plan is said, step by step, and never reaches the executor or the lock."""
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()
    run_once(monkeypatch, capsys, spec, state, fleet(spec, 0.0, stalled={"qwen3-prefill0-r0"}), dry_run=True)
    code, lines = run_once(monkeypatch, capsys, spec, state, fleet(spec, 5.0, stalled={"qwen3-prefill0-r0"}),
                           dry_run=True)
    (action,) = [line for line in lines if line["type"] == "action"]
    assert code == 3 and (action["unit"], action["result"]) == ("prefill0", "would restart")
    assert executed.plans == [] and executed.history == [] and state.restarted == {}
    assert ["docker", "stop", "--time", "30", "qwen3-prefill0-r1"] in [s["argv"] for s in action["steps"]]
    code, lines = run_once(monkeypatch, capsys, spec, watch.WatchState(), fleet(spec, 0.0, missing={"qwen3-proxy"}))
    assert code == 3 and [line["verdict"] for line in lines if line["instance"] == "qwen3-proxy"] == ["missing"]


def test_dry_run_says_each_command_in_the_table_too(monkeypatch, capsys, executed):
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()
    monkeypatch.setattr(watch, "probe", lambda *a, **k: fleet(spec, len(state.observations) and 5.0,
                                                              stalled={"qwen3-prefill0-r0"}))
    transports = {h.name: None for h in spec.hosts}
    for _ in range(2):
        code = watch.watch_once(spec, transports, state, args(dry_run=True), watch.Output(UI(output="table")))
    out = capsys.readouterr().out
    assert code == 3 and "would restart prefill0 (qwen3-prefill0-r0, qwen3-prefill0-r1)" in out
    assert "node1: docker stop --time 30 qwen3-prefill0-r0" in out and executed.plans == []


def test_the_state_file_keeps_the_probe_before_for_the_next_once(tmp_path):
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState(log_since={"a": "2026-11-25T23:10:16.000000001Z"}, restarted={"b": 3.0})
    for observation in fleet(spec, 1.0):
        state.observations[observation.instance] = observation
    path = tmp_path / ".deployctl" / "qwen3" / "watch.json"
    state.save(path)
    again = watch.WatchState.load(path)
    assert again == state
    path.write_text("{not json")
    assert watch.WatchState.load(path) == watch.WatchState()  # unreadable: this probe is the first


def test_the_loop_probes_every_interval_until_interrupted(monkeypatch, tmp_path):
    import contextlib

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(QWEN3 % "external")
    rounds, sleeps = [], []

    def once(spec, transports, state, a, out):
        rounds.append(len(rounds))
        if len(rounds) == 3:
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(watch, "watch_once", once)
    monkeypatch.setattr(watch.time, "sleep", sleeps.append)
    monkeypatch.setattr("deployctl.hosts.connected", lambda spec, options=None: contextlib.nullcontext({}))
    monkeypatch.setattr("deployctl.hosts.connect_options", lambda a, ui=None: None)
    with pytest.raises(KeyboardInterrupt):
        watch.run(argparse.Namespace(spec=str(spec_path), **vars(args(once=False, interval=7.0))), UI(output="json"))
    assert rounds == [0, 1, 2] and len(sleeps) == 2 and all(0 < s <= 7.0 for s in sleeps)
    assert (tmp_path / ".deployctl" / "qwen3" / "watch.json").exists()


def test_a_group_with_a_rank_missing_is_not_restarted_up_recreates_it(monkeypatch, capsys, executed):
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()
    stalled, missing = {"qwen3-decode0-r2"}, {"qwen3-decode0-r7"}
    run_once(monkeypatch, capsys, spec, state, fleet(spec, 0.0, stalled=stalled, missing=missing))
    code, lines = run_once(monkeypatch, capsys, spec, state, fleet(spec, 5.0, stalled=stalled, missing=missing))
    action = lines[-1]
    assert code == 3 and (action["type"], action["unit"], action["result"]) == ("action", "decode0", "skipped")
    assert action["error"] == "no container seen for qwen3-decode0-r7: `deployctl up` recreates what is missing"


def test_the_fronts_names_are_read_once_per_run_and_never_saved(monkeypatch, tmp_path):
    spec = load_spec_text(QWEN3 % "external")
    reads = []
    monkeypatch.setattr(watch, "front_addresses", lambda s, t: reads.append(1) or {"node1": "10.0.0.1"})
    state = watch.WatchState()
    assert watch.front_names(spec, {}, state) == watch.front_names(spec, {}, state) == {"node1": "10.0.0.1"}
    assert reads == [1]
    state.save(tmp_path / "watch.json")
    assert "front_names" not in json.loads((tmp_path / "watch.json").read_text())
    assert watch.WatchState.load(tmp_path / "watch.json").front_names is None  # the next run reads them again


# --- a host's text, a host that cannot be seen, a damaged state file ----------------------------------------------

TOKEN = "hf_wAtChSeCrEt0123456789"
DIED = "ERROR Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."


def probed_through(monkeypatch, spec, facts_of):
    """watch's own `probe` (its observations, made with the spec's secrets) over hosts whose answers are the
    HostFacts `facts_of(host)` returns: only the round trip is replaced."""
    from types import SimpleNamespace

    monkeypatch.setattr("deployctl.gather.run_probes", lambda transport, probes, timeout=0: transport.name)
    monkeypatch.setattr("deployctl.facts.assemble.host_facts_from", lambda host: facts_of(host))
    return {h.name: SimpleNamespace(name=h.name) for h in spec.hosts}


def host_facts(spec, host, t, lines=()):
    from deployctl.facts.deployed import DeployedState
    from deployctl.facts.model import ContainerDevices, HostFacts
    from deployctl.facts.progress import NewLines, ServerProgress

    here = [i for i in spec.instances if i.host == host]
    return HostFacts(
        deployed=DeployedState(containers=tuple(ContainerDevices(f"id-{i.name}", i.name, True, (), (), (),
                                                                 state="running") for i in here)),
        progress={i.port: ServerProgress(200, {"0": Engine("0", running=0.0, waiting=0.0, generation_tokens=t,
                                                           prompt_tokens=t)}) for i in here if i.port},
        liveness={i.port: Answer(200, 100) for i in here if i.port},
        new_log_lines={i.name: NewLines(tuple((f"2026-11-28T10:00:0{int(t)}.000000000Z", line)
                                              for line in lines if i.name == "qwen3-prefill0-r1"),
                                        f"2026-11-28T10:00:0{int(t)}.000000000Z") for i in here})


@pytest.mark.parametrize("output", ["json", "table"])
def test_a_secret_in_a_known_error_line_is_redacted_on_screen_and_in_the_history(monkeypatch, capsys, executed,
                                                                                 output):
    """The stalled verdict quotes the log line: the spec's own ${HF_TOKEN} in it is `<redacted>`, as `diagnose`
    writes it (diagnose/redact.py), on stdout, in the restart's reason and in the history line."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    spec = load_spec_text((QWEN3 % "external").replace("topology:", "env: {HF_TOKEN: '${HF_TOKEN}'}\ntopology:"))
    line = f"{DIED} (while fetching with {TOKEN})"  # the value alone: no NAME= beside it to go by
    rounds = []
    transports = probed_through(monkeypatch, spec, lambda host: host_facts(spec, host, float(len(rounds)),
                                                                           [line] if rounds else []))
    state = watch.WatchState()
    for _ in range(2):
        watch.watch_once(spec, transports, state, args(), watch.Output(UI(output=output)))
        rounds.append(1)
    out = capsys.readouterr().out
    assert "<redacted>" in out and "died unexpectedly" in out
    assert TOKEN not in out, out
    (history,) = executed.history
    assert history["unit"] == "prefill0" and "<redacted>" in history["reason"] and TOKEN not in json.dumps(history)


def test_a_host_whose_docker_daemon_is_down_fails_the_probe_with_a_message(monkeypatch, capsys, executed):
    """Every server of node2 unseen: `watch --once` (cron) exits 1 and says why, rather than 0 as if all were well."""
    from deployctl.facts.model import HostFacts

    spec = load_spec_text(QWEN3 % "external")
    down = HostFacts(probe_errors=(("deployed", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
                                                " Is the docker daemon running?"),))
    transports = probed_through(monkeypatch, spec,
                                lambda host: down if host == "node2" else host_facts(spec, host, 0.0))
    code = watch.watch_once(spec, transports, watch.WatchState(), args(), watch.Output(UI(output="json")))
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 1 and executed.plans == []
    (unseen,) = [x for x in lines if x["type"] == "unseen"]
    assert (unseen["host"], unseen["servers"]) == ("node2", 4)
    assert unseen["reason"].startswith("its Docker daemon did not answer (Cannot connect to the Docker daemon")
    assert {x["verdict"] for x in lines if x.get("host") == "node2" and x["type"] == "observation"} == {"unreachable"}


def test_a_host_that_cannot_be_asked_says_why_with_its_servers_redacted(monkeypatch, capsys, executed):
    """A host whose probe ends in an error (no SSH banner, a timeout) showed only "its host did not answer this
    probe": the error itself is said with its servers, redacted like every text watch quotes."""
    from deployctl.errors import DeployctlError

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    spec = load_spec_text((QWEN3 % "external").replace("topology:", "env: {HF_TOKEN: '${HF_TOKEN}'}\ntopology:"))

    def facts_of(host):
        if host == "node2":
            raise DeployctlError(f"node2: no SSH banner within 60 s (while sending {TOKEN})")
        return host_facts(spec, host, 0.0)

    transports = probed_through(monkeypatch, spec, facts_of)
    code = watch.watch_once(spec, transports, watch.WatchState(), args(), watch.Output(UI(output="json")))
    out = capsys.readouterr().out
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 1 and executed.plans == [] and TOKEN not in out
    reasons = {x["reason"] for x in lines if x.get("host") == "node2" and x["type"] == "observation"}
    assert reasons == {"its host did not answer this probe: node2: no SSH banner within 60 s (while sending "
                       "<redacted>)"}, reasons


@pytest.mark.parametrize("damage", [
    "[]", "{not json", '{"version": 1, "observations": []}', '{"version": 1, "restarted": {"a": "soon"}}',
    '{"version": 1, "restarted": {"a": NaN}}', '{"version": 1, "log_since": {"a": "--until=now"}}',
    '{"version": 1, "observations": {"a": {"instance": "a", "host": "h", "time": 1, "state": "running", '
    '"engines": {"0": {"generation_tokens": "12"}}}}}',
    '{"version": 1, "observations": {"a": {"instance": "a", "host": "h", "time": 1e999, "state": "running"}}}',
    '{"version": 1, "observations": {"a": {"instance": "a", "host": "h", "time": 1, "state": "running", '
    '"liveness": [200]}}}',
])
def test_a_damaged_state_file_is_rebuilt_with_a_message(tmp_path, damage):
    path = tmp_path / "watch.json"
    path.write_text(damage)
    said = []
    assert watch.WatchState.load(path, warn=said.append) == watch.WatchState()
    assert len(said) == 1 and said[0].startswith(f"{path} is damaged (") and "rebuilt" in said[0]
    assert watch.WatchState.load(tmp_path / "none.json", warn=said.append) == watch.WatchState() and len(said) == 1


def test_watch_on_a_damaged_state_file_probes_afresh_and_says_so(monkeypatch, tmp_path, capsys):
    import contextlib

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(QWEN3 % "external")
    state_file = tmp_path / ".deployctl" / "qwen3" / "watch.json"
    state_file.parent.mkdir(parents=True)
    state_file.write_text('{"version": 1, "observations": {"x": {"instance": "x", "host": "h", "time": 1, '
                          '"state": "running", "engines": {"0": {"running": "many"}}}}}')
    seen = []
    monkeypatch.setattr(watch, "watch_once", lambda spec, t, state, a, out: seen.append(state) or 0)
    monkeypatch.setattr("deployctl.hosts.connected", lambda spec, options=None: contextlib.nullcontext({}))
    monkeypatch.setattr("deployctl.hosts.connect_options", lambda a, ui=None: None)
    code = watch.run(argparse.Namespace(spec=str(spec_path), **vars(args())), UI(output="json"))
    assert code == 0 and seen == [watch.WatchState()]
    assert "watch.json is damaged (engines.0.running 'many' is not a finite number)" in capsys.readouterr().err
    assert json.loads(state_file.read_text())["observations"] == {}  # rebuilt


def test_a_group_up_just_started_is_let_load_at_every_probe(monkeypatch, capsys, executed):
    """No answer to /health at two probes, 5 and 10 s after its container started (`up` started it; docker's
    StartedAt): it is loading its model within the start-up budget, and nothing restarts it."""
    import dataclasses

    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()

    def loading(t):
        return [dataclasses.replace(o, health_code=0, liveness=None, engines={}, started=0.0)
                if o.instance.startswith("qwen3-decode0") and o.health_code is not None else o
                for o in fleet(spec, t)]

    for t in (5.0, 10.0):
        code, lines = run_once(monkeypatch, capsys, spec, state, loading(t))
        assert code == 0 and not [x for x in lines if x["type"] == "action"], lines
        assert {x["verdict"] for x in lines if x["instance"].startswith("qwen3-decode0-r0")} == {"starting"}
    assert executed.plans == []
