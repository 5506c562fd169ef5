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


@pytest.fixture
def recorded(monkeypatch):
    acts = []

    def act(spec, transports, state, restart, observations, a, out):
        acts.append((restart.unit, a.dry_run))
        result = "would restart" if a.dry_run else "ok"
        out.action(restart, result, _plan(spec))
        return result

    monkeypatch.setattr(watch, "act", act)
    return acts


def _plan(spec):
    from deployctl.plan.model import Plan

    return Plan(spec.name, ())


def run_once(monkeypatch, capsys, spec, state, observations, **changes):
    monkeypatch.setattr(watch, "probe", lambda *a, **k: observations)
    code = watch.watch_once(spec, {}, state, args(**changes), watch.Output(UI(output="json")))
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_stalled_rank_restarts_its_group_and_the_lines_say_it(monkeypatch, capsys, recorded):
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()
    code, lines = run_once(monkeypatch, capsys, spec, state, fleet(spec, 0.0, stalled={"qwen3-decode0-r2"}))
    assert code == 0 and recorded == [] and len(lines) == len(spec.instances)
    assert {line["verdict"] for line in lines} == {"idle", "suspect", "healthy"}
    code, lines = run_once(monkeypatch, capsys, spec, state, fleet(spec, 5.0, stalled={"qwen3-decode0-r2"}))
    assert code == 0 and recorded == [("decode0", False)]
    verdicts = {line["instance"]: line["verdict"] for line in lines if line["type"] == "observation"}
    assert verdicts["qwen3-decode0-r2"] == "stalled" and verdicts["qwen3-decode0-r3"] == "idle"
    action = lines[-1]
    assert (action["type"], action["unit"], action["result"]) == ("action", "decode0", "ok")
    assert action["containers"] == [f"qwen3-decode0-r{r}" for r in range(8)]


def test_dry_run_restarts_nothing_and_exits_3_missing_containers_exit_3(monkeypatch, capsys, recorded):
    spec = load_spec_text(QWEN3 % "external")
    state = watch.WatchState()
    run_once(monkeypatch, capsys, spec, state, fleet(spec, 0.0, stalled={"qwen3-prefill0-r0"}), dry_run=True)
    code, _ = run_once(monkeypatch, capsys, spec, state, fleet(spec, 5.0, stalled={"qwen3-prefill0-r0"}),
                       dry_run=True)
    assert code == 3 and recorded == [("prefill0", True)]
    code, lines = run_once(monkeypatch, capsys, spec, watch.WatchState(), fleet(spec, 0.0, missing={"qwen3-proxy"}))
    assert code == 3 and [line["verdict"] for line in lines if line["instance"] == "qwen3-proxy"] == ["missing"]


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


def test_a_group_with_a_rank_missing_is_not_restarted_up_recreates_it(monkeypatch, capsys):
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
