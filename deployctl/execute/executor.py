"""Executor: a Plan's stages in order, each stage's steps in parallel; undo everything on failure.

With gather.py, the only code that calls a transport. Progress goes out through `on_event`, so this never
touches the screen."""

from __future__ import annotations

import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from deployctl.core import Command
from deployctl.errors import DeployctlError, HostError
from deployctl.execute.health import Cancelled, wait_healthy
from deployctl.plan.actions import AnswerCheck, AwaitListed, Build, Drain, Fetch, RunHook, Ship, SyncList
from deployctl.plan.compile_cache import CacheCopy
from deployctl.plan.model import CONTROL_HOST, HealthCheck, Plan, PutFile, Stage, Step
from deployctl.transport import Result, Transport

# (kind, step, message); kinds: start, progress, transfer (a fetcher's progress line), done, failed, undo,
# stage (a stage finished; message: its summary), warning (said, the run goes on: a drain that timed out)
Event = Callable[[str, Step, str], None]
EVENTS = ("start", "progress", "transfer", "done", "failed", "undo", "stage", "warning")


@dataclass
class StepOutcome:
    step: Step
    status: str = "pending"  # pending | done | failed | undone | skipped | committed (a finished rollout wave's)
    error: Optional[object] = None
    results: list[Result] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # builds and ships: seconds per host
    transferred: int = 0  # weight bytes moved
    copies: dict[str, dict] = field(default_factory=dict)  # compile caches: target -> seconds, bytes, path taken
    left_in_flight: str = ""  # a drain's: what was still in flight at its deadline, stopped gracefully anyway
    drain_left: dict[str, Optional[float]] = field(default_factory=dict)  # the same per server (None: not known)
    hook: dict = field(default_factory=dict)  # a hook's run, as the history keeps it (execute/hooks.py)


@dataclass
class Report:
    outcomes: list[StepOutcome]
    failed: bool = False
    interrupted: bool = False
    rolled_back: bool = False
    error: Optional[DeployctlError] = None
    # restored by the rollback but not serving again, each naming host and container (the rollback is not whole)
    not_restored: list[str] = field(default_factory=list)
    waves: int = 0  # a drain rollout's waves in the plan
    waves_done: list[int] = field(default_factory=list)  # committed: they stay even when a later one fails
    wave_failed: int = 0  # the wave that failed and was rolled back (0: none)

    @property
    def drain_left(self) -> list[str]:
        """What each drain left in flight at its deadline, by wave (its step's outcome says)."""
        return [f"wave {o.step.wave}: {o.left_in_flight}" for o in self.outcomes if o.left_in_flight]

    @property
    def drain_counts(self) -> dict[str, Optional[float]]:
        """Requests each drained server still held at its drain's deadline (None: its /metrics did not answer)."""
        return {name: n for o in self.outcomes for name, n in o.drain_left.items()}

    @property
    def hooks(self) -> list[dict]:
        """Every hook that ran: point, host, result, exit code, start and seconds."""
        return [o.hook for o in self.outcomes if o.hook]

    def results_of(self, stage: str) -> list[StepOutcome]:
        return [o for o in self.outcomes if o.step.stage == stage]

    @property
    def executed(self) -> int:
        """How many steps actually ran something (0 on a no-op re-run)."""
        return sum(1 for o in self.outcomes
                   if o.status in ("done", "failed", "undone", "committed") and o.step.changes)


def run_checked(transport: Transport, command: Command, *, timeout: Optional[float] = None) -> Result:
    """Run a command; a non-zero exit of a checked command is a HostError with the stderr tail."""
    result = transport.run(command, timeout=timeout)
    if command.check and not result.ok:
        raise HostError(transport.name, command.failure or f"command failed with exit code {result.exit_code}",
                        address=transport.address, command=command.display(), exit_code=result.exit_code,
                        stderr_tail=(result.stderr or result.stdout)[-2000:])
    return result


class Executor:
    """Runs a plan against open transports, with rollback of what it changed when anything fails."""

    def __init__(self, transports: Mapping[str, Transport], *, on_event: Optional[Event] = None,
                 health_timeout: float = 1200.0, poll_interval: float = 0.5, presign=None) -> None:
        self.transports = transports
        if CONTROL_HOST not in transports:  # hooks `on: control` run here, through the local host's transport
            from deployctl.transport.local import LocalTransport

            self.transports = {**transports, CONTROL_HOST: LocalTransport(CONTROL_HOST)}
        self.on_event = on_event or (lambda kind, step, message: None)
        self.health_timeout = health_timeout
        self.poll_interval = poll_interval
        self.presign = presign  # (bucket, keys) -> pre-signed URLs, for weight fetches from a store
        # Hosts sharing a weights fetch ask each other for parts with this (stdin only, like the URLs).
        self.peer_token = secrets.token_urlsafe(32)
        self.cancel = threading.Event()
        # Set when Ctrl-C arrives or a step of the running stage fails: its siblings stop waiting on health
        # (a DP group whose rank 0 died never gets healthy) and the rollback starts at once.
        self.stop_stage = threading.Event()
        self._finalizing: list[threading.Thread] = []  # committed waves' finalize still running

    def execute(self, plan: Plan) -> Report:
        report = Report([], waves=max((stage.wave for stage in plan.stages), default=0))
        try:
            for stage in plan.stages:
                outcomes = [StepOutcome(step) for step in stage.steps]
                report.outcomes.extend(outcomes)
                runnable = [o for o in outcomes if o.step.changes]
                for outcome in outcomes:
                    if not outcome.step.changes:
                        outcome.status = "skipped"
                if runnable:
                    self.stop_stage.clear()
                    self._run_stage(runnable)
                failed = [o for o in runnable if o.status == "failed"]
                if failed:
                    report.failed = True
                    report.error = _first_error(failed)
                    report.wave_failed = stage.wave
                    break
                self._stage_done(stage, outcomes)
                if stage.commit:
                    self._commit(report, stage.wave)
        except KeyboardInterrupt:
            self.cancel.set()
            report.failed = report.interrupted = True
            report.wave_failed = next((o.step.wave for o in reversed(report.outcomes) if o.status != "pending"), 0)
        except Exception:  # a bug in a step: what it changed is undone, then it reaches the CLI's bug report
            self.cancel.clear()
            self._undo(report)
            for thread in self._finalizing:
                thread.join()
            self._finalizing.clear()
            raise
        if report.failed:
            self.cancel.clear()  # the interrupt stopped the forward path; the rollback must run to the end
            self._undo(report)
            report.rolled_back = True
        else:
            self._finalize(report)
        for thread in self._finalizing:  # the committed waves' finalize, run beside the waves after them
            thread.join()
        self._finalizing.clear()
        return report

    def _commit(self, report: Report, wave: int) -> None:
        """A rollout wave passed: what ran so far is kept; a later failure rolls back only from here on. Its finalize
        (removing the old containers) runs in the background: the next wave touches none of them."""
        self._finalize(report, wait=False)
        for outcome in report.outcomes:
            if outcome.status == "done":
                outcome.status = "committed"
        report.waves_done.append(wave)

    def _stage_done(self, stage: Stage, outcomes: list[StepOutcome]) -> None:
        if stage.summary:
            moved = sum(o.transferred for o in outcomes)
            self.on_event("stage", Step("", stage.name, "stage"), stage.summary_after(moved))

    def _run_stage(self, outcomes: list[StepOutcome]) -> None:
        pool = ThreadPoolExecutor(max_workers=min(32, len(outcomes)))
        futures = [pool.submit(self._run_step, o) for o in outcomes]
        try:
            while wait(futures, timeout=0.05).not_done:
                pass  # short waits keep Ctrl-C responsive in the main thread
        except KeyboardInterrupt:
            self.cancel.set()
            self.stop_stage.set()
            # Container steps stop at the next command or health poll: wait for them, so that the rollback
            # sees where they stopped. A build, ship or transfer has nothing to roll back and may run for
            # hours: it ends when the caller closes its transport.
            for future, outcome in zip(futures, outcomes):
                if not outcome.step.actions:
                    future.result()
            raise
        finally:
            pool.shutdown(wait=False)
        for future in futures:  # what a step raised beyond DeployctlError (a bug) is never left in its future
            future.result()

    def _run_step(self, outcome: StepOutcome) -> None:
        step = outcome.step
        transport = self.transports[step.host]
        self.on_event("start", step, step.reason)
        try:
            for item in step.work:
                if self.stop_stage.is_set():
                    raise Cancelled
                if isinstance(item, HealthCheck):
                    outcome.status = "done"  # from here on, undo must run even if health fails
                self._dispatch(transport, outcome, item)
            outcome.status = "done"
        except Cancelled:
            said = "interrupted" if self.cancel.is_set() else "stopped: another step of this stage failed"
            outcome.status, outcome.error = "failed", said
            self.on_event("failed", step, said)
            return
        except DeployctlError as error:
            outcome.status, outcome.error = "failed", error
            self.stop_stage.set()
            self.on_event("failed", step, error.message)
            return
        except Exception as error:  # a bug: the step failed, its siblings stop, and `_run_stage` raises it
            outcome.status, outcome.error = "failed", error
            self.stop_stage.set()
            raise
        self.on_event("done", step, "")

    def _dispatch(self, transport: Transport, outcome: StepOutcome, item) -> None:
        step = outcome.step
        if isinstance(item, PutFile):
            transport.put(item.path, item.content, mode=item.mode)
        elif isinstance(item, Command):
            outcome.results.append(run_checked(transport, item))
        elif isinstance(item, HealthCheck):
            self._wait(transport, step, item, cancel=self.stop_stage)
        elif isinstance(item, Build):
            from deployctl.execute.image import run_build

            outcome.seconds[step.host] = run_build(transport, item)
        elif isinstance(item, Ship):
            from deployctl.execute.image import run_ship

            outcome.seconds.update(run_ship(transport, item, self.transports))
        elif isinstance(item, Fetch):
            from deployctl.execute.weights import run_fetch

            started = time.monotonic()
            outcome.transferred += run_fetch(transport, item, self.presign,
                                             lambda line: self.on_event("transfer", step, line),
                                             host=step.host, token=self.peer_token)
            outcome.seconds[step.host] = time.monotonic() - started
        elif isinstance(item, Drain):
            from deployctl.execute.drain import run_drain

            left = run_drain(transport, item, poll_interval=self.poll_interval, cancel=self.stop_stage,
                             on_progress=lambda line: self.on_event("progress", step, line))
            if left:
                from deployctl.facts.in_flight import left_in_flight

                outcome.drain_left = left
                outcome.left_in_flight = (f"still in flight after {item.timeout:g} s, stopped gracefully: "
                                          f"{left_in_flight(left)}")
                self.on_event("warning", step, outcome.left_in_flight)
        elif isinstance(item, AwaitListed):
            from deployctl.execute.drain import await_listed

            await_listed(transport, item, poll_interval=self.poll_interval, cancel=self.stop_stage,
                         on_progress=lambda line: self.on_event("progress", step, line))
        elif isinstance(item, SyncList):
            from deployctl.execute.drain import sync_list

            sync_list(transport, item, poll_interval=self.poll_interval, cancel=self.stop_stage,
                      on_progress=lambda line: self.on_event("progress", step, line))
        elif isinstance(item, CacheCopy):
            from deployctl.execute.compile_cache import run_cache_copy

            for target, copied in run_cache_copy(transport, item, self.transports).items():
                outcome.seconds[target] = copied.seconds
                outcome.copies[target] = {"key": item.key, "from": step.host, **copied.to_json()}
        elif isinstance(item, AnswerCheck):
            from deployctl.execute.answers import run_answer_check

            run_answer_check(transport, item)
        elif isinstance(item, RunHook):
            from deployctl.execute.hooks import run_hook

            outcome.hook, failure = run_hook(transport, item, step.host)
            if failure is not None:
                raise failure
        else:  # a planner and this dispatch out of step: a bug, never user input
            raise TypeError(f"no executor for {type(item).__name__}")

    def _wait(self, transport: Transport, step: Step, health: HealthCheck, timeout: Optional[float] = None,
              cancel: Optional[threading.Event] = None) -> None:
        wait_healthy(transport, health, timeout=self.health_timeout if timeout is None else timeout,
                     poll_interval=self.poll_interval, cancel=cancel or self.cancel,
                     on_progress=lambda line: self.on_event("progress", step, line))

    def _undo(self, report: Report) -> None:
        """Undo in reverse order, then wait for what was restored: a scheduler's health needs its workers back
        first, so waiting step by step would spend the whole health timeout on it."""
        restored, late = [], []
        for outcome in reversed(report.outcomes):
            if outcome.status not in ("done", "failed") or not (outcome.step.undo or outcome.step.late_undo):
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
                if outcome.step.late_undo:
                    late.append((transport, outcome.step))
            except (HostError, Cancelled):
                pass  # best effort: the status table after rollback shows what each host runs
            outcome.status = "undone"
        # Each restored container is waited for until it serves again: the rollback is whole only then.
        for transport, step in reversed(restored):  # the plan's start order
            try:
                self._wait(transport, step, step.undo_health, timeout=min(self.health_timeout, 120))
            except HostError as error:  # said, not raised: the first error is the one the user must see
                report.not_restored.append(error.message)
                self.on_event("failed", step, f"restored, but {error.message}")
            except Cancelled:
                report.not_restored.append(f"{step.host}: {step.container} interrupted while waiting to serve again")
        # Then what had to wait for them: a restored server goes back into the front only once it serves.
        for transport, step in late:
            for command in step.late_undo:
                try:
                    run_checked(transport, command, timeout=120)
                except HostError as error:
                    report.not_restored.append(f"{step.host}: {error.message}")

    def _finalize(self, report: Report, wait: bool = True) -> None:
        """Each done step's finalize commands, best effort, every step's at once; `wait` False: joined at the end of
        `execute` instead."""
        def run(transport: Transport, commands: tuple[Command, ...]) -> None:
            for command in commands:
                try:
                    transport.run(command, timeout=120)
                except HostError:
                    pass

        threads = [threading.Thread(target=run, args=(self.transports[o.step.host], o.step.finalize), daemon=True)
                   for o in report.outcomes if o.status == "done" and o.step.finalize]
        for thread in threads:
            thread.start()
        if wait:
            for thread in threads:
                thread.join()
        else:
            self._finalizing.extend(threads)


def _first_error(failed: list[StepOutcome]) -> DeployctlError:
    for outcome in failed:
        if isinstance(outcome.error, DeployctlError):
            return outcome.error
    step = failed[0].step
    return HostError(step.host, f"{step.container or step.stage}: {failed[0].error}")
