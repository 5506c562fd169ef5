"""Runs a planned hook (plan/actions.py RunHook) through its step's transport: the control machine's LocalTransport
or a host's SSH transport, one command of quoted words (`python3 -c` run_hook.py, then the hook's own words); the
environment goes on stdin as a Secret. Returns what the history keeps of it; a failure is a HookFailed."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from deployctl.core import Command, Secret
from deployctl.errors import HookFailed, HostError
from deployctl.plan.actions import RunHook
from deployctl.plan.hooks import PRE
from deployctl.plan.model import CONTROL_HOST

GRACE_S = 15  # beyond the hook's own timeout: run_hook.py's TERM, 5 s, KILL, then the transport's own bound
TAIL_CHARS = 2000


def hook_program() -> str:
    return (Path(__file__).parent / "run_hook.py").read_text()


def hook_command(hook: RunHook, python: str = "python3") -> Command:
    """The words of the run (no secret among them) and the environment, as JSON, on stdin."""
    env = {var.name: _text(var.value) for var in hook.env}
    request = json.dumps({"env": env, "timeout": hook.timeout})
    return Command((python, "-c", hook_program(), *hook.argv), stdin=Secret(request, label="the hook's environment"),
                   check=False)


def run_hook(transport, hook: RunHook, host: str) -> tuple[dict, Optional[HookFailed]]:
    """(the history's record of the run, the error when it failed)."""
    from deployctl.execute.run_hook import MARK, TIMED_OUT

    python = sys.executable if host == CONTROL_HOST else "python3"  # the control machine: deployctl's own
    started, began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.monotonic()
    record = {"hook": hook.point, "host": host, **({"wave": hook.wave} if hook.wave else {}), "started": started}
    shown = shlex.join(hook.argv)
    try:
        result = transport.run(hook_command(hook, python), timeout=hook.timeout + GRACE_S)
    except HostError as error:  # the connection was lost, or the transport's own bound passed
        record.update(result="failed", seconds=round(time.monotonic() - began, 3))
        return record, HookFailed(hook.point, host, f"did not finish: {error.message}", command=shown,
                                  refused=hook.point in PRE, wave=hook.wave)
    record.update(seconds=round(time.monotonic() - began, 3), exit_code=result.exit_code)
    said = [line for line in result.stderr.splitlines() if line.startswith(MARK)]
    tail = _scrubbed((result.stdout + "".join(line + "\n" for line in result.stderr.splitlines()
                                              if not line.startswith(MARK)))[-TAIL_CHARS:], hook)
    if result.ok:
        record["result"] = "ok"
        return record, None
    if result.exit_code == TIMED_OUT and said and "timed out" in said[-1]:
        record["result"] = "timed out"
        message = f"timed out after {hook.timeout} s (stopped: TERM, then KILL)"
    elif said:
        record["result"] = "failed"
        message = said[-1][len(MARK):].strip()
    else:
        record["result"] = "failed"
        message = f"failed with exit code {result.exit_code}"
    return record, HookFailed(hook.point, host, message, exit_code=result.exit_code, output_tail=tail,
                              command=shown, refused=hook.point in PRE, wave=hook.wave)


def _text(value) -> str:
    if isinstance(value, Secret):
        value = value.reveal()
        return value.decode() if isinstance(value, bytes) else value
    return value


def _scrubbed(text: str, hook: RunHook) -> str:
    """The hook's output without its own secret values (errors.py redacts the spec's known ones too)."""
    from deployctl.diagnose.redact import MIN_SECRET_LENGTH

    for var in hook.env:
        if var.is_secret and len(_text(var.value)) >= MIN_SECRET_LENGTH:
            text = text.replace(_text(var.value), var.display)
    return text
