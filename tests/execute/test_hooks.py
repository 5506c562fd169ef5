"""execute/hooks.py through the control machine's LocalTransport: the hook's words are argv, its env arrives on
stdin (never a word of any process), its output's tail names a failure, and its timeout stops its whole group."""

from __future__ import annotations

import sys

from deployctl.core import Secret
from deployctl.execute.hooks import hook_command, run_hook
from deployctl.plan.actions import RunHook
from deployctl.plan.model import CONTROL_HOST
from deployctl.spec.model import EnvVar
from deployctl.transport.local import LocalTransport

SECRET = "hook-secret-0123456789"
ENV = (EnvVar("TOKEN", Secret(SECRET, "${TOKEN}"), "${TOKEN}"), EnvVar("DEPLOYCTL_HOOK", "pre_up", "pre_up"))


def hook(*argv: str, timeout: int = 30, point: str = "pre_up") -> RunHook:
    return RunHook(point, argv, timeout, ENV)


def test_the_env_reaches_the_hook_and_no_secret_is_a_word():
    command = hook_command(hook("sh", "-c", 'test "$TOKEN" = "$1" && echo "$DEPLOYCTL_HOOK"', "sh", SECRET))
    assert SECRET not in " ".join(command.argv[3:4])  # the program itself
    plain = hook_command(hook("printenv", "TOKEN"))
    assert not any(SECRET in word for word in plain.argv) and SECRET not in plain.display()
    record, error = run_hook(LocalTransport(CONTROL_HOST), hook("printenv", "TOKEN"), CONTROL_HOST)
    assert error is None and record["result"] == "ok" and record["exit_code"] == 0 and record["hook"] == "pre_up"


def test_a_failing_hook_is_named_with_its_exit_code_and_output_tail_without_its_secret():
    record, error = run_hook(LocalTransport(CONTROL_HOST), hook(
        "sh", "-c", 'echo "catalogue refused $TOKEN"; echo oops >&2; exit 7'), CONTROL_HOST)
    assert record["result"] == "failed" and record["exit_code"] == 7
    assert error.message == "(control): pre_up hook failed with exit code 7" and int(error.exit_status) == 3
    assert "catalogue refused ${TOKEN}" in error.stderr_tail and "oops" in error.stderr_tail
    assert SECRET not in error.stderr_tail
    _, post = run_hook(LocalTransport(CONTROL_HOST), hook("false", point="post_up"), CONTROL_HOST)
    assert int(post.exit_status) == 1


def test_a_missing_command_says_so():
    record, error = run_hook(LocalTransport(CONTROL_HOST), hook("/nonexistent/hook"), CONTROL_HOST)
    assert record["exit_code"] == 127 and "cannot run /nonexistent/hook" in error.message


def test_the_timeout_stops_the_hook_and_what_it_started(tmp_path):
    marker = tmp_path / "child.pid"
    # a child in the background of a shell: killing the shell alone would leave it holding the output pipe
    script = f'sleep 300 & echo $! > {marker}; wait'
    record, error = run_hook(LocalTransport(CONTROL_HOST), hook("sh", "-c", script, timeout=1), CONTROL_HOST)
    assert record["result"] == "timed out" and record["exit_code"] == 124
    assert "timed out after 1 s" in error.message
    pid = int(marker.read_text())
    assert not _alive(pid), f"the hook's child {pid} outlived its timeout"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_control_machine_runs_the_hook_with_deployctls_own_python():
    assert hook_command(hook("true"), sys.executable).argv[0] == sys.executable
