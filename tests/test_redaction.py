"""One redaction for every place deployctl quotes a host's text (deployctl/redaction.py): the spec's own
`${HF_TOKEN}` value, put into what a host says, is `<redacted>` in what the user sees (text and JSON) and in what
deployctl writes on a host. Each surface is reached through its command or its own code, the host's answer real
(a local command, the Docker CLI's own error) or given whole where a container's output is needed."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from deployctl.cli import main
from deployctl.transport import Result
from deployctl.transport.local import LocalTransport

TOKEN = "hf_rEdAcTmE0123456789abcdef"
SPEC = textwrap.dedent("""\
    version: 1
    name: redact-demo
    hosts:
      here: {address: local}
    image: {name: img}
    weights: {dest: /srv/weights/tiny}
    env: {HF_TOKEN: '${HF_TOKEN}'}
    model: {served_name: m, max_model_len: 4096, max_num_seqs: 16, max_num_batched_tokens: 4096}
    topology:
      mode: mixed
      instances:
        - {host: here, devices: [0], port: 8000}
    """)
# vLLM logs its non-default arguments as it starts (vllm/entrypoints/utils.py log_non_default_args), an API key
# passed as --api-key among them; the same value the spec passes as ${HF_TOKEN} here
STARTED = f"INFO 11-28 10:00:00 [utils.py:253] non-default args: {{'model': '/srv/weights/tiny', 'api_key': ['{TOKEN}']}}"


@pytest.fixture
def spec_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


class Host(LocalTransport):
    """The local host, but `docker logs` answers with `lines` (a container's own output, timestamped)."""

    def __init__(self, lines):
        super().__init__("here", "local")
        self.lines = lines

    def run(self, command, *, timeout=None):
        if command.argv[:2] == ("docker", "logs"):
            text = "".join(f"2026-11-28T10:00:0{i}.000000000Z {line}\n" for i, line in enumerate(self.lines))
            return Result(command.argv, 0, text, "")
        return super().run(command, timeout=timeout)


def opened_as(monkeypatch, host):
    """hosts.connected opens `host` for the spec's one host: the rest of the command runs as it does."""
    monkeypatch.setattr("deployctl.transport.connect.open_transports",
                        lambda hosts, **_: ({"here": host}, {}))


def run(capsys, *argv):
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.skipif(shutil.which("docker") is None, reason="the Docker CLI's own error is the host's text here")
@pytest.mark.parametrize("output", ["table", "json"])
def test_a_hosts_stderr_tail_at_the_cli_edge(spec_path, monkeypatch, capsys, output):
    """`status` on a host whose Docker daemon does not answer: the CLI's error quotes the socket's path, which holds
    the secret here; the error's stderr tail (text on stderr, `stderr_tail` in the JSON document) is redacted."""
    monkeypatch.setenv("DOCKER_HOST", f"unix:///tmp/deployctl-test-{TOKEN}.sock")  # never there: nothing listens
    code, out, err = run(capsys, "status", spec_path, "--output", output)
    assert code == 1 and "Cannot connect to the Docker daemon" in err
    assert TOKEN not in out + err and "deployctl-test-<redacted>.sock" in err
    if output == "json":
        assert json.loads(out)["error"]["stderr_tail"].endswith("deployctl-test-<redacted>.sock. Is the docker "
                                                                "daemon running?")


@pytest.mark.parametrize("output", ["table", "json"])
def test_logs_print_the_log_but_the_specs_secret_values(spec_path, monkeypatch, capsys, output):
    """`deployctl logs` prints what the container wrote, but for the spec's own secret values: a user asking for
    logs expects them, and the contract never prints a secret (vLLM's start-up line holds an --api-key)."""
    opened_as(monkeypatch, Host([STARTED, "INFO Uvicorn running on http://0.0.0.0:8000"]))
    code, out, err = run(capsys, "logs", spec_path, "--output", output)
    assert code == 0 and TOKEN not in out + err
    assert "non-default args: {'model': '/srv/weights/tiny', 'api_key': ['<redacted>']}" in out
    assert "Uvicorn running on http://0.0.0.0:8000" in out  # the rest as it was written
    if output == "json":
        assert json.loads(out)["instances"][0]["lines"][0].endswith("'api_key': ['<redacted>']}")


def test_a_checked_commands_stderr_in_the_error_made_of_it(spec_path):
    """What a host's command said enters HostError redacted (errors.py): every place that quotes the error (the
    CLI edge, watch's failed restart, doctor's fix lines, a rollback's not-restored list) quotes it so."""
    from deployctl.core import Command
    from deployctl.errors import HostError
    from deployctl.execute.executor import run_checked
    from deployctl.redaction import know
    from deployctl.spec.load import load_spec
    from deployctl.ui import error_document

    know(load_spec(spec_path), {})
    with pytest.raises(HostError) as caught:
        run_checked(LocalTransport("here"), Command(("sh", "-c", f'echo "401 for token {TOKEN}" >&2; exit 3')))
    assert caught.value.stderr_tail.strip() == "401 for token <redacted>"
    assert TOKEN not in json.dumps(error_document(caught.value))


def test_a_progress_line_quoting_a_containers_last_log_line(spec_path, capsys):
    """`up`'s health wait shows the container's last log line as progress (execute/health.py): on stderr,
    redacted."""
    from deployctl.plan.model import Step
    from deployctl.redaction import know
    from deployctl.spec.load import load_spec
    from deployctl.ui import UI
    from deployctl.ui.events import up_events

    know(load_spec(spec_path), {})
    step = Step("here", "workers", "create", "new", container="redact-demo-mixed-0")
    with up_events(UI()) as on_event:
        on_event("progress", step, STARTED)
        on_event("failed", step, f"here: redact-demo-mixed-0 exited while starting: {TOKEN}")
    err = capsys.readouterr().err
    assert TOKEN not in err and err.count("<redacted>") == 2


def test_a_history_record_written_on_the_host(spec_path, tmp_path):
    """The deploy lock appends the holder's record to history.jsonl on the host: a reason quoting a host's text
    is written redacted (watch's restart reasons, any later record that quotes a host)."""
    from deployctl.lock import DeployLock
    from deployctl.redaction import know
    from deployctl.spec.load import load_spec

    know(load_spec(spec_path), {})
    with DeployLock(LocalTransport("here"), str(tmp_path), "watch") as lock:
        lock.history = {"action": "watch restart", "reason": f"stalled: 401 for token {TOKEN}",
                        "containers": [f"x-{TOKEN}"]}
    written = (tmp_path / "history.jsonl").read_text()
    assert TOKEN not in written
    record = json.loads(written)
    assert record["reason"] == "stalled: 401 for token <redacted>" and record["containers"] == ["x-<redacted>"]


def test_status_timeline_quotes_a_damaged_history_line_redacted(spec_path, monkeypatch, capsys):
    """`status --timeline` names each history line it passes over, quoting the host's file: redacted."""
    damaged = {"action": "up", "result": "ok", "time_to_serve": {"wall_s": f"{TOKEN}"}}

    class History(LocalTransport):
        def run(self, command, *, timeout=None):
            return Result(command.argv, 0, json.dumps(damaged) + "\n", "")

    opened_as(monkeypatch, History("here"))
    for output in ("table", "json"):
        code, out, err = run(capsys, "status", spec_path, "--timeline", "--output", output)
        assert code == 3 and TOKEN not in out + err and "<redacted>" in out + err


def test_a_fact_parsers_quote_of_a_tools_line(spec_path):
    from deployctl.errors import FactParseError
    from deployctl.redaction import know
    from deployctl.spec.load import load_spec

    know(load_spec(spec_path), {})
    error = FactParseError("npu-smi", 3, f"garbage {TOKEN}", "a table row")
    assert TOKEN not in error.message + error.line and "<redacted>" in error.message


def test_up_smoke_answers_quote_a_server_redacted(spec_path):
    """`up`'s result carries each smoke request's answer (a server's words): redacted."""
    from types import SimpleNamespace

    from deployctl.commands.up import smoke_answers
    from deployctl.redaction import know
    from deployctl.spec.load import load_spec

    know(load_spec(spec_path), {})
    outcome = SimpleNamespace(step=SimpleNamespace(container="c", stage="verify"),
                              results=[Result(("curl",), 0, f"<html>bad gateway {TOKEN}</html>", "")])
    report = SimpleNamespace(results_of=lambda stage: [outcome])
    assert smoke_answers(report) == {"c": "<html>bad gateway <redacted></html>"}


def test_a_new_command_forgets_the_last_specs_values(spec_path, monkeypatch, capsys):
    """One process, two commands (the e2e suite runs the CLI in-process): the first spec's values are not the
    second's."""
    from deployctl import redaction

    opened_as(monkeypatch, Host([STARTED]))
    run(capsys, "logs", spec_path)
    assert redaction.known() == (TOKEN,)
    run(capsys, "validate", spec_path)
    assert redaction.known() == ()
