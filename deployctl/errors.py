"""Typed errors and exit codes; rendered once, at the CLI edge (cli.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ExitStatus(enum.IntEnum):
    OK = 0
    FAILED = 1
    SPEC = 2  # bad usage, invalid spec or ranktable
    CHECKS = 3  # doctor (or up's checks) found a failing check
    NOT_THERE = 3  # what was asked about is not there: `status` of a deployment none of whose containers exists
    DRAIN_LEFT = 4  # `up` deployed, but a drain's deadline passed with requests in flight (stopped gracefully then)
    INTERRUPTED = 130


class DeployctlError(Exception):
    """Base of every expected failure; carries its exit status and an optional hint."""

    exit_status = ExitStatus.FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def lines(self) -> list[str]:
        """The lines a user sees for this error (without the hint)."""
        return [self.message]


class UsageError(DeployctlError):
    exit_status = ExitStatus.SPEC


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: where (file/line/col/path) and what."""

    path: tuple = ()
    message: str = ""
    hint: str | None = None
    file: str = ""
    line: int = 0
    column: int = 0
    severity: str = "error"  # error | warning

    @property
    def dotted_path(self) -> str:
        """The path in the contract's form: `topology.prefill[0].devices[1]`."""
        out = ""
        for part in self.path:
            if isinstance(part, int):
                out += f"[{part}]"
            else:
                out += ("." if out else "") + str(part)
        return out or "(root)"

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else (self.file or "spec")
        return f"{where}: {self.dotted_path}: {self.message}"

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.dotted_path,
            "message": self.message,
            **({"hint": self.hint} if self.hint else {}),
        }


class SpecError(DeployctlError):
    """A spec failed to load or validate; carries every problem found."""

    exit_status = ExitStatus.SPEC

    def __init__(self, problems: list[Problem], warnings: list[Problem] | None = None) -> None:
        count = len(problems)
        super().__init__(f"invalid spec: {count} error{'s' if count != 1 else ''}")
        self.problems = list(problems)
        self.warnings = list(warnings or [])

    def lines(self) -> list[str]:
        # The summary first, so each problem line starts at column 0 (`file:line:col:` for editors and CI).
        return [self.message] + [
            ("warning: " if p.severity == "warning" else "") + p.render() + (f"\n  hint: {p.hint}" if p.hint else "")
            for p in self.problems + self.warnings
        ]


class ExportError(SpecError):
    """A valid spec that a Kubernetes target cannot express: each problem at its spec path, exit 2."""

    def __init__(self, problems: list[Problem], target: str = "") -> None:
        super().__init__(problems)
        count = len(problems)
        self.message = (f"cannot export{' to ' + target if target else ''}: {count} "
                        f"problem{'s' if count != 1 else ''}")


class FlagError(UsageError):
    """Command-line values that break the rule of what they become (a Kubernetes name, a path): exit 2, one
    line per flag (`flags`: objects with render() and to_json(), e.g. export/flags.py's BadFlag)."""

    def __init__(self, flags: list, what: str = "") -> None:
        count = len(flags)
        super().__init__(f"{what + ': ' if what else ''}{count} invalid flag value{'s' if count != 1 else ''}")
        self.flags = list(flags)

    def lines(self) -> list[str]:
        return [self.message] + [flag.render() for flag in self.flags]


class FactParseError(DeployctlError):
    """A vendor tool printed something its parser does not understand."""

    def __init__(self, tool: str, line_no: int, line: str, expected: str) -> None:
        from deployctl.redaction import redact

        line = redact(line)  # the tool's own words: a host's text
        super().__init__(f"{tool}: cannot parse line {line_no}: {line!r} (expected {expected})")
        self.tool, self.line_no, self.line, self.expected = tool, line_no, line, expected


class HostError(DeployctlError):
    """Something failed on (or on the way to) one host; the message names the host."""

    def __init__(
        self,
        host: str,
        message: str,
        *,
        address: str | None = None,
        command: str | None = None,
        exit_code: int | None = None,
        stderr_tail: str = "",
        hint: str | None = None,
    ) -> None:
        from deployctl.redaction import redact

        # where a host's text enters deployctl's errors: the spec's secret values in it are never shown or written
        where = f"{host} ({address})" if address and address != host else host
        super().__init__(f"{where}: {redact(message)}", hint=hint)
        self.host, self.address, self.command = host, address, command and redact(command)
        self.exit_code, self.stderr_tail = exit_code, redact(stderr_tail)

    def lines(self) -> list[str]:
        out = [self.message]
        if self.command:
            out.append(f"  command: {self.command}")
        if self.stderr_tail:
            out.extend("  | " + line for line in self.stderr_tail.rstrip().splitlines()[-10:])
        return out


class HostKeyError(HostError):
    """A host's SSH key is unknown or changed: never silently accepted."""


class RanktableError(DeployctlError):
    """A ranktable is invalid or cannot be built/merged."""

    exit_status = ExitStatus.SPEC

    def __init__(self, message: str, problems: list[Problem] | None = None, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = list(problems or [])

    def lines(self) -> list[str]:
        return [self.message] + [f"  {p.render()}" for p in self.problems]


class PlanError(DeployctlError):
    """The spec and the facts cannot be turned into a plan (e.g. an NPU held by another owner)."""


class ChecksFailed(DeployctlError):
    """A host check failed; nothing was changed."""

    exit_status = ExitStatus.CHECKS


class HookFailed(HostError):
    """The user's hook failed, timed out or could not start: named with its point, host and its output's tail. A
    failed pre_* refused the action before any change (exit 3, as a failed check); any other marks the result."""

    def __init__(self, point: str, host: str, message: str, *, exit_code: int | None = None, output_tail: str = "",
                 command: str | None = None, refused: bool = False, wave: int = 0) -> None:
        hint = ("nothing was changed: fix the hook (or run with --skip hooks) and run it again" if refused else
                "the hook's own command failed; deployctl's work above stands as it is said")
        super().__init__(host, f"{point} hook{f' of wave {wave}' if wave else ''} {message}", command=command,
                         exit_code=exit_code,
                         stderr_tail=output_tail, hint=hint)
        self.point = point
        self.exit_status = ExitStatus.CHECKS if refused else ExitStatus.FAILED


class RolloutFailed(HostError):
    """A drain rollout stopped at a wave: that wave was rolled back (its previous containers restored and back in
    the front); the waves before it stay done. The cause is the first error of the failed wave."""

    def __init__(self, cause: DeployctlError, waves: int, done: list[int], failed: int) -> None:
        host = cause.host if isinstance(cause, HostError) else ""
        kept = (f"waves {', '.join(map(str, done))} of {waves} done (their servers run the new configuration)"
                if done else "no wave done")
        super().__init__(host, f"rollout stopped in wave {failed} of {waves}: {cause.message}; {kept}; wave "
                               f"{failed} rolled back (its previous containers restored and put back into the front)",
                         hint=cause.hint or "fix the cause and run `up` again: it replaces only what still differs")
        self.message = self.message.lstrip(": ")
        self.address = cause.address if isinstance(cause, HostError) else None
        self.stderr_tail = cause.stderr_tail if isinstance(cause, HostError) else ""
        self.command = cause.command if isinstance(cause, HostError) else None
        self.cause = cause
        self.rollout = {"waves": waves, "waves_done": list(done), "wave_failed": failed}
