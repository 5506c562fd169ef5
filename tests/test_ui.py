"""Terminal output: tables through a pipe print every value in full; numbers are never cut."""

from __future__ import annotations

import ast
import io
import json
import os
import pathlib
import subprocess
import sys

import pytest
from rich.console import Console
from rich.table import Table

import deployctl
from deployctl.core import Command
from deployctl.execute.executor import EVENTS
from deployctl.plan.model import ACTIONS, Plan, Stage, Step
from deployctl.ui import UI, keep_numbers_whole, render_plan
from deployctl.ui.events import up_events

LONG_NAME = "a-deployment-name-of-forty-characters-xx"


def piped(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real CLI with stdout a pipe and COLUMNS=80, as in a CI log or `| less`."""
    return subprocess.run([sys.executable, "-m", "deployctl", *argv], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1", **(env or {})})


def assert_in_full(out: str, values) -> None:
    assert "…" not in out, out
    cut = [value for value in values if str(value) not in out]
    assert cut == [], out


def long_spec(tmp_path) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"version: 1\nname: {LONG_NAME}\nplatform: ascend\nserver: vllm\n"
        "hosts:\n  a-host-name-that-is-quite-long-as-well: {address: 192.0.2.21}\n"
        "image: {name: deployctl/standin-vllm:latest}\n"
        "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
        "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
        "topology:\n  mode: mixed\n  instances:\n"
        "    - {host: a-host-name-that-is-quite-long-as-well, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 58080}\n")
    return str(path)


def test_validate_through_a_pipe_prints_every_value_in_full(tmp_path):
    done = piped("validate", long_spec(tmp_path))
    assert done.returncode == 0, done.stderr
    assert_in_full(done.stdout, [f"{LONG_NAME}-mixed-0", "a-host-name-that-is-quite-long-as-well",
                                 "0,1,2,3,4,5,6,7", "58080"])
    assert max(len(line) for line in done.stdout.splitlines()) > 80  # wider than the terminal would be


def numbers_table() -> Table:
    table = Table(title="bench")
    for header in ("instance", "req/s", "out tok/s", "TTFT p99"):
        table.add_column(header, justify="right")
    table.add_row(LONG_NAME, "12345.67", "987654.3", "100200.3")
    return table


def terminal(width: int) -> Console:
    """A terminal of this width, set up as UI.console() sets up its consoles (soft wrap: never cropped)."""
    return Console(file=io.StringIO(), force_terminal=True, width=width, no_color=True, soft_wrap=True)


def test_at_a_narrow_terminal_numbers_stay_whole_while_text_gives_way():
    console = terminal(40)
    table = numbers_table()
    keep_numbers_whole(table, "req/s", "out tok/s", "TTFT p99")
    console.print(table)
    out = console.file.getvalue()
    assert all(f" {n} " in out for n in ("12345.67", "987654.3", "100200.3")), out
    assert LONG_NAME not in out  # the text column gave way to fit the terminal


def test_without_it_a_narrow_terminal_cuts_numbers():
    console = terminal(40)
    console.print(numbers_table())
    assert "12345.…" in console.file.getvalue()  # rich's default, which keep_numbers_whole prevents


def test_at_a_terminal_too_narrow_for_the_numbers_they_are_still_never_cut():
    console = terminal(30)
    table = numbers_table()
    keep_numbers_whole(table, "req/s", "out tok/s", "TTFT p99")
    console.print(table)
    out = console.file.getvalue()
    assert "…" not in out.replace(LONG_NAME[:3] + "…", "")
    assert all(f" {n} " in out for n in ("12345.67", "987654.3", "100200.3")), out


def test_verbose_prints_what_each_step_runs_and_never_a_secret(capsys):
    from deployctl.core import Command, Secret
    from deployctl.plan.model import HealthCheck, PutFile, Step
    from deployctl.ui import UI, progress_printer

    step = Step("tb1", "workers", "create", "not running", container="c1",
                puts=(PutFile("/var/lib/deployctl/d/env/c1.env", Secret("TOKEN=hf_sekrit", "env file"), 0o600),),
                commands=(Command(("docker", "run", "--name", "c1", "img:1")),),
                health=HealthCheck("c1", 8000))
    progress_printer(UI(verbose=True, color=False))("start", step, "not running")
    err = capsys.readouterr().err
    assert "docker run --name c1 img:1" in err and "put /var/lib/deployctl/d/env/c1.env (mode 600" in err
    assert "GET http://127.0.0.1:8000/health" in err and "hf_sekrit" not in err
    progress_printer(UI(color=False))("start", step, "not running")
    assert "docker run" not in capsys.readouterr().err  # without --verbose, one line per step


def _literals(node) -> list[str]:
    """The string constants an argument can take (a literal, or either side of `a if c else b`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def _kinds_in_source(callee: str, position: int, keyword: str, *, receiver: str = "") -> set[str]:
    """Every literal the package's code passes as `keyword` (or argument `position`) of a call to `callee`."""
    found = set()
    for path in pathlib.Path(deployctl.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name != callee or (receiver and not ast.unparse(node.func).startswith(receiver)):
                continue
            args = node.args[position:position + 1] + [k.value for k in node.keywords if k.arg == keyword]
            for arg in args:
                found.update(_literals(arg))
    return found


def test_every_action_a_planner_writes_is_a_known_one():
    written = _kinds_in_source("Step", 2, "action") | _kinds_in_source("_stop_step", 2, "action")
    assert {"drain", "add", "create", "remove"} <= written  # the scan finds the rollout's steps
    assert written - set(ACTIONS) == set()


def test_every_event_the_executor_sends_is_a_known_one():
    sent = _kinds_in_source("on_event", 0, "kind", receiver="self.on_event")
    assert {"warning", "start", "done"} <= sent
    assert sent - set(EVENTS) == set()


@pytest.mark.parametrize("action", ACTIONS + ("an-action-no-table-knows",))
def test_plan_prints_every_action_as_text_and_json(action, capsys):
    """`plan` of a rollout through a router (drain, add) ended in a MarkupError: those actions had no style."""
    plan = Plan("d", (Stage("drain", (Step("h", "drain", action, reason="[/] out of the router", container="c",
                                           commands=(Command(("curl", "[/]")),)),)),))
    render_plan(UI(), plan)
    out = capsys.readouterr().out
    assert f"  {action:<8} h" in out and "[/] out of the router" in out and "$ curl '[/]'" in out
    render_plan(UI(output="json"), plan)
    assert json.loads(capsys.readouterr().out)["steps"][0]["action"] == action


@pytest.mark.parametrize("output", ["table", "json"])
@pytest.mark.parametrize("kind", EVENTS + ("an-event-no-table-knows",))
def test_up_prints_every_event_the_executor_sends(kind, output, capsys):
    """A drain that timed out sent `warning`, which had no style: rich raised and the warning was lost."""
    step = Step("h", "drain", "drain", container="c")
    with up_events(UI(output=output)) as on_event:
        on_event(kind, step, "still in flight after 0 s [/]: s: 1 request(s)")
    err = capsys.readouterr().err
    if kind == "transfer":  # a fetcher's progress line: this message is none, so no bar opens
        assert err == ""
    elif kind == "stage":
        assert err.startswith("stage still in flight")
    else:
        assert "drain h c" in err and "still in flight after 0 s [/]: s: 1 request(s)" in err
        assert kind == "progress" or err.startswith(kind)
