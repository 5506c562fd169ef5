"""Commands as data: what `up` would run is a list of words before it is executed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

from deployctl.core import Command, Secret

if TYPE_CHECKING:
    from deployctl.plan.actions import Action


@dataclass(frozen=True)
class PutFile:
    """A file to write on a host (atomically); a Secret content is only ever written with mode 0600."""

    path: str
    content: Union[Secret, bytes]
    mode: int = 0o644

    def display(self) -> str:
        shown = repr(self.content) if isinstance(self.content, Secret) else f"{len(self.content)} bytes"
        return f"put {self.path} (mode {self.mode:o}, {shown})"


@dataclass(frozen=True)
class HealthCheck:
    """Wait until a container serves `GET /health` on the host's loopback; fail at once if it exits."""

    container: str
    port: int
    path: str = "/health"

    def display(self) -> str:
        return f"wait until GET http://127.0.0.1:{self.port}{self.path} answers 200 ({self.container})"


# The host of a step that runs on the machine deployctl runs on (a hook `on: control`): no host name can be it.
CONTROL_HOST = "(control)"

# Every Step.action a planner writes (tests/test_ui.py renders each, and finds each in the planners' source)
ACTIONS = ("create", "replace", "keep", "remove", "run", "put", "skip", "check", "build", "ship", "fetch", "drain",
           "add", "restart", "stage")


@dataclass(frozen=True)
class Step:
    """One host's work in a stage: files to put, then commands; `undo` reverts it, `finalize` commits it."""

    host: str
    stage: str
    action: str  # one of ACTIONS
    reason: str = ""
    puts: tuple[PutFile, ...] = ()
    commands: tuple[Command, ...] = ()
    undo: tuple[Command, ...] = ()
    finalize: tuple[Command, ...] = ()
    health: Optional[HealthCheck] = None
    container: Optional[str] = None
    undo_health: Optional[HealthCheck] = None  # what `undo` restores, waited for so rollback ends serving
    actions: tuple[Action, ...] = ()  # builds, ships, weight transfers (after puts and commands)
    wave: int = 0  # a drain rollout's wave (1, 2, ...); 0: not part of one
    # undone after what the rollback restored serves again (a backend put back into the front only then)
    late_undo: tuple[Command, ...] = ()

    @property
    def changes(self) -> bool:
        return self.action not in ("keep", "skip", "check")

    @property
    def work(self) -> tuple:
        """Everything the step does, in order: files, commands, typed actions, then the health wait."""
        return (*self.puts, *self.commands, *self.actions, *((self.health,) if self.health else ()))


@dataclass(frozen=True)
class Stage:
    """Steps that run in parallel across hosts; stages run in order, a failed stage stops the run."""

    name: str
    steps: tuple[Step, ...]
    summary: str = ""  # said once the stage ran (`weights: 2 host(s) hold 3 files`)
    counts_bytes: bool = False  # the summary goes on with the bytes the stage moved
    wave: int = 0  # a drain rollout's wave (1, 2, ...); 0: not part of one
    # a rollout wave ends here: what ran so far is kept (finalized) even if a later wave fails
    commit: bool = False
    hook: str = ""  # a hook's stage: its point (pre_up, post_wave, ...)

    def summary_after(self, moved: int) -> str:
        if not self.counts_bytes:
            return self.summary
        return self.summary + (f", {moved} bytes transferred" if moved else ", nothing to transfer")


@dataclass(frozen=True)
class Plan:
    deployment: str
    stages: tuple[Stage, ...]
    # hosts whose image identity is known only once the image stage ran (a base or the image itself must be
    # pulled): `up` runs the image stages, gathers again and plans the rest
    pending: tuple[str, ...] = ()
    profile: Optional[str] = None  # vllm-ascend: which server profile applies, and why
    rollout: Optional[dict] = None  # how the serving containers are replaced: strategy, waves, gap (plan/rollout.py)
    on_failure: tuple[Stage, ...] = ()  # the on_failure hook: run only after a rollback (or a failed `down`)

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for stage in self.stages for step in stage.steps)

    @property
    def changed(self) -> bool:
        return any(step.changes for step in self.steps)

    def to_json(self) -> dict:
        """The contract's `plan` document: one entry per command or file, in execution order."""
        failure = [entry for stage in self.on_failure for entry in _entries(stage.steps)]
        return {"deployment": self.deployment, "changed": self.changed, "steps": _entries(self.steps),
                "moves": self.moves(), **({"server_profile": self.profile} if self.profile else {}),
                **({"rollout": self.rollout} if self.rollout else {}), **({"on_failure": failure} if failure else {})}

    def moves(self) -> list[dict]:
        """Bytes each host receives: image builds' contexts and ships, weight transfers (None: known later)."""
        from deployctl.plan.actions import Build, Fetch, Ship

        totals: dict[str, dict] = {}

        def add(host: str, key: str, amount: Optional[int]) -> None:
            row = totals.setdefault(host, {"host": host, "image_bytes": 0, "weight_bytes": 0})
            row[key] = None if amount is None or row[key] is None else row[key] + amount

        for step in self.steps:
            for action in step.actions:
                if isinstance(action, Build):
                    add(step.host, "image_bytes", action.bytes)
                elif isinstance(action, Ship):
                    for target in action.targets:
                        add(target, "image_bytes", action.size)
                elif isinstance(action, Fetch):
                    add(step.host, "weight_bytes", action.bytes)
        return list(totals.values())


def _entries(steps) -> list[dict]:
    """One entry per file, command or typed action of each step, in execution order."""
    entries = []
    for step in steps:
        base = {"host": step.host, "stage": step.stage, "action": step.action, "reason": step.reason}
        if step.wave:
            base["wave"] = step.wave
        if step.container:
            base["container"] = step.container
        if not step.puts and not step.commands and not step.actions:
            entries.append({**base, "argv": []})
        for put in step.puts:
            entries.append({**base, "argv": [], "put": put.path, "mode": f"{put.mode:o}"})
        for command in step.commands:
            entries.append({**base, "argv": list(command.argv)})
        for action in step.actions:
            entries.append({**base, "argv": [], **action.to_json()})
    return entries
