"""execute: run a Plan's stages in order, each stage's steps in parallel; undo everything on failure.

The only module (with gather.py) that calls a transport. Progress goes out through `on_event`, so this
module never imports rich.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from deployctl.errors import HostError
from deployctl.core import Command
from deployctl.plan.model import HealthCheck, Plan, Step
from deployctl.transport import Result, Transport

Event = Callable[[str, Step, str], None]  # (kind, step, message); kinds: start, progress, done, failed, undo

# One round trip per poll: container state, then the HTTP status of its health endpoint, then its last log line.
_HEALTH_SCRIPT = (
    # `docker inspect --format` prints an empty line when it fails: judge by its status, and tell a missing
    # container from a daemon that stopped answering.
    's=$(docker inspect --format "{{.State.Status}} {{.State.ExitCode}}" "$1" 2>/dev/null) && echo "$s" || '
    '{ docker version --format "{{.Server.Version}}" >/dev/null 2>&1 && echo "missing 0" || echo "no-daemon 0"; }; '
    'curl --silent --max-time 2 --output /dev/null --write-out "%{http_code}\\n" "http://127.0.0.1:$2$3" || echo; '
    'docker logs --tail 1 "$1" 2>&1 | tail -n 1'
)


@dataclass
class StepOutcome:
    step: Step
    status: str = "pending"  # pending | done | failed | undone | skipped
    error: Optional[str] = None
    results: list[Result] = field(default_factory=list)


@dataclass
class Report:
    outcomes: list[StepOutcome]
    failed: bool = False
    interrupted: bool = False
    rolled_back: bool = False
    error: Optional[HostError] = None

    def results_of(self, stage: str) -> list[StepOutcome]:
        return [o for o in self.outcomes if o.step.stage == stage]

    @property
    def executed(self) -> int:
        """How many steps actually ran something (0 on a no-op re-run)."""
        return sum(1 for o in self.outcomes if o.status in ("done", "failed", "undone") and o.step.changes)


class _Cancelled(Exception):
    pass


def run_checked(transport: Transport, command: Command, *, timeout: Optional[float] = None) -> Result:
    """Run a command; a non-zero exit of a checked command is a HostError with the stderr tail."""
    result = transport.run(command, timeout=timeout)
    if command.check and not result.ok:
        raise HostError(
            transport.name,
            f"command failed with exit code {result.exit_code}",
            address=getattr(transport, "address", None),
            command=command.display(),
            exit_code=result.exit_code,
            stderr_tail=(result.stderr or result.stdout)[-2000:],
        )
    return result


class Executor:
    """Runs a plan against open transports, with rollback of what it changed when anything fails."""

    def __init__(self, transports: Mapping[str, Transport], *, on_event: Optional[Event] = None,
                 health_timeout: float = 1200.0, poll_interval: float = 0.5) -> None:
        self.transports = transports
        self.on_event = on_event or (lambda kind, step, message: None)
        self.health_timeout = health_timeout
        self.poll_interval = poll_interval
        self.cancel = threading.Event()

    def execute(self, plan: Plan) -> Report:
        report = Report([])
        try:
            for stage in plan.stages:
                outcomes = [StepOutcome(step) for step in stage.steps]
                report.outcomes.extend(outcomes)
                runnable = [o for o in outcomes if o.step.changes]
                for outcome in outcomes:
                    if not outcome.step.changes:
                        outcome.status = "skipped"
                if runnable:
                    self._run_stage(runnable)
                failed = [o for o in runnable if o.status == "failed"]
                if failed:
                    report.failed = True
                    report.error = _first_error(failed)
                    break
        except KeyboardInterrupt:
            self.cancel.set()
            report.failed = report.interrupted = True
        if report.failed:
            self.cancel.clear()  # the interrupt stopped the forward path; the rollback must run to the end
            self._undo(report)
            report.rolled_back = True
        else:
            self._finalize(report)
        return report

    def _run_stage(self, outcomes: list[StepOutcome]) -> None:
        with ThreadPoolExecutor(max_workers=min(32, len(outcomes))) as pool:
            futures = [pool.submit(self._run_step, o) for o in outcomes]
            try:
                for future in futures:
                    while not future.done():
                        time.sleep(0.05)  # short waits keep Ctrl-C responsive in the main thread
            except KeyboardInterrupt:
                self.cancel.set()
                for future in futures:
                    future.result()
                raise

    def _run_step(self, outcome: StepOutcome) -> None:
        step = outcome.step
        transport = self.transports[step.host]
        self.on_event("start", step, step.reason)
        try:
            for put in step.puts:
                if self.cancel.is_set():
                    raise _Cancelled
                transport.put(put.path, put.content, mode=put.mode)
            for command in step.commands:
                if self.cancel.is_set():
                    raise _Cancelled
                outcome.results.append(run_checked(transport, command))
            outcome.status = "done"  # from here on, undo must run even if health fails
            if step.health:
                self._wait_healthy(transport, step, step.health)
        except _Cancelled:
            outcome.status, outcome.error = "failed", "interrupted"
            self.on_event("failed", step, "interrupted")
            return
        except HostError as error:
            outcome.status, outcome.error = "failed", error
            self.on_event("failed", step, error.message)
            return
        self.on_event("done", step, "")

    def _wait_healthy(self, transport: Transport, step: Step, health: HealthCheck,
                      timeout: Optional[float] = None) -> None:
        timeout = self.health_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        command = Command(("sh", "-c", _HEALTH_SCRIPT, "sh", health.container, str(health.port), health.path))
        last_line = ""
        while True:
            if self.cancel.is_set():
                raise _Cancelled
            lines = (transport.run(command, timeout=30).stdout.splitlines() + ["", "", ""])[:3]
            state, http, last_line = lines[0].split(" ")[0], lines[1].strip(), lines[2].strip() or last_line
            if http == "200":
                return
            if state == "no-daemon":
                raise HostError(transport.name, f"the Docker daemon is not reachable (waiting for {health.container})",
                                address=getattr(transport, "address", None),
                                hint="start it (systemctl start docker) and check `docker ps` on the host; "
                                     "then run `up` again")
            if state in ("exited", "dead", "missing"):
                raise HostError(transport.name, f"{health.container} {state} while starting",
                                address=getattr(transport, "address", None),
                                stderr_tail=self._log_tail(transport, health.container))
            self.on_event("progress", step, last_line)
            if time.monotonic() > deadline:
                raise HostError(transport.name,
                                f"{health.container} not healthy after {timeout:.0f} s",
                                address=getattr(transport, "address", None),
                                stderr_tail=self._log_tail(transport, health.container),
                                hint="raise --health-timeout if the model needs longer to load")
            time.sleep(self.poll_interval)

    @staticmethod
    def _log_tail(transport: Transport, container: str) -> str:
        result = transport.run(Command(("docker", "logs", "--tail", "20", container)), timeout=30)
        return (result.stdout + result.stderr)[-3000:]

    def _undo(self, report: Report) -> None:
        """Undo in reverse order, then wait for what was restored: a scheduler's health needs its workers back
        first, so waiting step by step would spend the whole health timeout on it."""
        restored = []
        for outcome in reversed(report.outcomes):
            if outcome.status not in ("done", "failed") or not outcome.step.undo:
                continue
            transport = self.transports[outcome.step.host]
            self.on_event("undo", outcome.step, "rolling back")
            undo = outcome.step.undo
            if outcome.status == "failed" and outcome.step.stage == "stop":
                # It failed before the rename: the old container still has its name; just start it again.
                undo = (Command(("docker", "start", outcome.step.container or ""), check=False),)
            try:
                for command in undo:
                    transport.run(command, timeout=120)
                if outcome.step.undo_health and outcome.status == "done":
                    restored.append((transport, outcome.step))
            except (HostError, _Cancelled):
                pass  # best effort: the status table after rollback shows what each host runs
            outcome.status = "undone"
        for transport, step in reversed(restored):  # the plan's start order
            try:
                self._wait_healthy(transport, step, step.undo_health, timeout=min(self.health_timeout, 120))
            except HostError as error:  # said, not raised: the first error is the one the user must see
                self.on_event("failed", step, f"restored, but {error.message}")
            except _Cancelled:
                pass

    def _finalize(self, report: Report) -> None:
        for outcome in report.outcomes:
            if outcome.status == "done":
                for command in outcome.step.finalize:
                    try:
                        self.transports[outcome.step.host].run(command, timeout=120)
                    except HostError:
                        pass


def _first_error(failed: list[StepOutcome]) -> HostError:
    for outcome in failed:
        if isinstance(outcome.error, HostError):
            return outcome.error
    step = failed[0].step
    return HostError(step.host, f"{step.container or step.stage}: {failed[0].error}")
