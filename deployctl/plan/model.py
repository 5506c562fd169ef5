"""Commands as data: what `up` would run is a list of words before it is executed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from deployctl.core import Command, Secret


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


@dataclass(frozen=True)
class Step:
    """One host's work in a stage: files to put, then commands; `undo` reverts it, `finalize` commits it."""

    host: str
    stage: str
    action: str  # create | replace | keep | remove | run | put | skip
    reason: str = ""
    puts: tuple[PutFile, ...] = ()
    commands: tuple[Command, ...] = ()
    undo: tuple[Command, ...] = ()
    finalize: tuple[Command, ...] = ()
    health: Optional[HealthCheck] = None
    container: Optional[str] = None
    undo_health: Optional[HealthCheck] = None  # what `undo` restores, waited for so rollback ends serving

    @property
    def changes(self) -> bool:
        return self.action not in ("keep", "skip")


@dataclass(frozen=True)
class Stage:
    """Steps that run in parallel across hosts; stages run in order, a failed stage stops the run."""

    name: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Plan:
    deployment: str
    stages: tuple[Stage, ...]

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for stage in self.stages for step in stage.steps)

    @property
    def changed(self) -> bool:
        return any(step.changes for step in self.steps)

    def to_json(self) -> dict:
        """The contract's `plan` document: one entry per command or file, in execution order."""
        entries = []
        for step in self.steps:
            base = {"host": step.host, "stage": step.stage, "action": step.action, "reason": step.reason}
            if step.container:
                base["container"] = step.container
            if not step.puts and not step.commands:
                entries.append({**base, "argv": []})
            for put in step.puts:
                entries.append({**base, "argv": [], "put": put.path, "mode": f"{put.mode:o}"})
            for command in step.commands:
                entries.append({**base, "argv": list(command.argv)})
        return {"deployment": self.deployment, "steps": entries}
