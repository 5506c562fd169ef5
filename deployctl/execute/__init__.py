"""The one executor: a Plan's stages in order, each stage's steps in parallel across hosts, one dispatch over
the action types, rollback of what changed on failure; progress goes out as events, never to the screen."""

from deployctl.execute.executor import Event, Executor, Report, StepOutcome, run_checked

__all__ = ["Event", "Executor", "Report", "StepOutcome", "run_checked"]
