"""All terminal output goes through the ui package (rich is imported lazily, here and nowhere else)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any


UNBOUNDED_WIDTH = 100_000


@dataclass
class UI:
    """Output settings from the common flags: --output, --verbose, --quiet, --no-color."""

    output: str = "table"
    verbose: bool = False
    quiet: bool = False
    color: bool = True
    emitted: bool = False  # a document is on stdout: a failure after it must not print a second one

    @property
    def json(self) -> bool:
        return self.output == "json"

    def console(self, stderr: bool = False):
        """A rich Console on stdout (or stderr); created lazily so --help stays fast."""
        from rich.console import Console

        no_color = not self.color or "NO_COLOR" in os.environ
        console = Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=True)
        if not console.is_terminal:
            # piped or logged, nothing is cut to "…": tables print at their natural width, however wide
            console.width = UNBOUNDED_WIDTH
        return console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Human output to stdout (suppressed in json mode, where stdout holds one document)."""
        if not self.json:
            self.console().print(*objects, **kwargs)

    def info(self, message: str) -> None:
        """Progress and notes: stderr, so stdout stays clean for scripts."""
        if not self.quiet:
            self.console(stderr=True).print(message)

    def emit_json(self, document: Any) -> None:
        """The one JSON document a read command prints with --output json."""
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()
        self.emitted = True


def escape(text: str) -> str:
    """Text shown as it is, never read as console markup (host output, user values)."""
    from rich.markup import escape as escape_markup

    return escape_markup(text)


def confirm_or_refuse(what: str, yes: bool) -> None:
    """Ask before a destructive change: `--yes` answers yes; without a terminal the change is refused (exit 2)."""
    from deployctl.errors import UsageError

    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"this would {what}; refusing without a terminal",
                         hint="re-run with --yes to allow replacing or removing containers")
    if input(f"This will {what}. Continue? [y/N] ").strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was changed")


def render_error(ui: UI, error: Exception) -> None:
    """Render an expected failure (DeployctlError) once, without a traceback."""
    from rich.markup import escape

    from deployctl.errors import DeployctlError

    console = ui.console(stderr=True)
    if isinstance(error, DeployctlError):
        lines = error.lines()
        console.print(f"[bold red]error:[/] {escape(lines[0])}")
        for line in lines[1:]:
            console.print(escape(line))
        if error.hint:
            console.print(f"  [cyan]hint:[/] {escape(error.hint)}")
    else:
        console.print(f"[bold red]error:[/] {escape(str(error))}")


def render_warning(ui: UI, error) -> None:
    """A failure that does not decide the exit (an on_failure hook's), said on stderr even with --quiet."""
    from rich.markup import escape

    console = ui.console(stderr=True)
    lines = error.lines()
    console.print(f"[bold yellow]warning:[/] {escape(lines[0])}")
    for line in lines[1:]:
        console.print(escape(line))


def error_document(error: Exception) -> dict:
    """`--output json` on failure: one document a script can read instead of an empty stdout."""
    from deployctl.errors import DeployctlError, HostError

    body: dict = {"type": type(error).__name__, "message": getattr(error, "message", str(error)),
                  "exit_code": int(getattr(error, "exit_status", 1))}
    if isinstance(error, DeployctlError):
        if error.hint:
            body["hint"] = error.hint
        if isinstance(error, HostError):
            body.update(host=error.host, address=error.address)
            if error.stderr_tail:  # what the host said: a container's last log lines, a command's stderr
                body["stderr_tail"] = error.stderr_tail
        if getattr(error, "rollout", None):  # a drain rollout that stopped: its waves, done and failed
            body["rollout"] = error.rollout
        if getattr(error, "diagnose", None):  # a failed `up`'s bundle: {"bundle": path, "hints": [...]}
            body["diagnose"] = error.diagnose
        for key in ("problems", "warnings", "flags"):
            problems = getattr(error, key, None)
            if problems is not None:
                body[key] = [p.to_json() for p in problems]
    return {"ok": False, "error": body}


def keep_numbers_whole(table, *headers: str) -> None:
    """At a narrow terminal a number is never cut: its column does not wrap, keeps the width of its widest
    cell, and folds rather than shows "…" should the terminal be narrower still."""
    from rich.text import Text

    for column in table.columns:
        if column.header in headers:
            widths = [Text.from_markup(cell).cell_len if isinstance(cell, str) else len(str(cell))
                      for cell in column.cells]
            column.no_wrap, column.overflow = True, "fold"
            column.min_width = max(widths, default=None)


_ACTION_STYLE = {"create": "green", "replace": "yellow", "remove": "red", "keep": "dim", "run": "cyan",
                 "put": "cyan", "skip": "dim", "build": "cyan", "ship": "cyan", "fetch": "cyan", "check": "magenta",
                 "drain": "yellow", "add": "cyan", "restart": "yellow"}
_EVENT_STYLE = {"start": "cyan", "done": "green", "failed": "red", "undo": "yellow", "warning": "bold yellow"}
PLAIN = "none"  # rich's null style


def style_of(styles: dict, kind: str) -> str:
    """The style of a step's action or an event's kind; one with none of its own prints plain (an empty style
    would write `[]...[/]`, which rich refuses with a MarkupError)."""
    return styles.get(kind) or PLAIN


def render_plan(ui: UI, plan) -> None:
    """Every step `up` would take, per stage and host, with the exact argv of each command."""
    if ui.json:
        ui.emit_json(plan.to_json())
        return
    from dataclasses import replace

    from rich.markup import escape

    console = ui.console()
    console.print(f"[bold]plan for {plan.deployment}[/]" + ("" if plan.changed else " — nothing to change"))
    if getattr(plan, "profile", None):
        console.print(escape(plan.profile))
    for line in rollout_lines(getattr(plan, "rollout", None)):
        console.print(escape(line))
    failure = tuple(replace(s, name=f"{s.name}: on_failure, only after a rollback") for s in plan.on_failure)
    for stage in plan.stages + failure:
        if not stage.steps:
            continue
        console.print(f"\n[bold]{stage.name}[/]" + (f" [dim](wave {stage.wave})[/]" if stage.wave else ""))
        for step in stage.steps:
            style = style_of(_ACTION_STYLE, step.action)
            what = step.container or ""
            console.print(f"  [{style}]{escape(f'{step.action:<8}')}[/] {escape(f'{step.host:<12}')} {escape(what)}  "
                          f"[dim]{escape(step.reason)}[/]")
            for put in step.puts:
                console.print(f"      {escape(put.display())}")
            for command in step.commands:
                console.print(f"      $ {escape(command.display())}")
            for action in step.actions:  # image builds and ships, weight transfers: what moves, in bytes
                console.print(f"      {escape(action.display())}")


def rollout_lines(rollout) -> list[str]:
    """How the plan replaces serving containers: the strategy, each wave, and any gap it leaves."""
    if not rollout:
        return []
    lines = [f"rollout: {rollout['strategy']}" + (f" through the {rollout['front']}" if rollout.get("front")
                                                   and rollout["strategy"] == "drain" else "")]
    for wave in rollout.get("waves", ()):
        lines.append(f"  wave {wave['wave']}: {', '.join(wave['units'])}")
    if rollout.get("gap"):
        lines.append(f"  gap: {rollout['gap']}")
    return lines


def render_status(ui: UI, spec, rows: list, title: str = "") -> None:
    """The instances table of `status` and of `up`'s summary."""
    if ui.json:
        return
    from rich.table import Table

    table = Table(title=title or None, title_justify="left")
    for column in ("instance", "role", "host", "devices", "port", "state", "health", "image"):
        table.add_column(column, no_wrap=column == "instance")
    for row in rows:
        health = {"healthy": "[green]healthy[/]", "hung": "[bold red]hung[/] (health 200, no generate)"}.get(
            row.get("health", "healthy" if row["healthy"] else "unhealthy"), "[red]unhealthy[/]")
        state_style = "green" if row["state"] == "running" else "red"
        table.add_row(row["name"], row["role"] or "", row["host"], ",".join(map(str, row["devices"])) or "-",
                      str(row["port"] or ""), f"[{state_style}]{row['state']}[/]", health,
                      (row["image"] or "")[7:19])
    keep_numbers_whole(table, "devices", "port")
    ui.console().print(table)


def render_report(ui: UI, report) -> None:
    """What ran, what failed, what was rolled back (stderr: stdout stays for the result)."""
    console = ui.console(stderr=True)
    for outcome in report.outcomes:
        if outcome.status == "failed":
            console.print(f"[red]failed[/] {outcome.step.stage} on {outcome.step.host}: "
                          f"{outcome.step.container or ''}")
    if report.rolled_back:
        undone = [o for o in report.outcomes if o.status == "undone"]
        if report.not_restored:
            console.print(f"[red]rolled back, but not whole[/]: {len(undone)} step(s) undone; "
                          f"{len(report.not_restored)} restored container(s) do not serve again: "
                          + escape("; ".join(report.not_restored)))
        else:
            console.print(f"[yellow]rolled back[/]: {len(undone)} step(s) undone; the previous containers run again")
    for line in report.drain_left:  # said even with --quiet: these requests were cut short by the deadline
        console.print(f"[bold yellow]drain deadline[/]: {escape(line)}")


def progress_printer(ui: UI):
    """An on_event callback for execute(): one line per step start/finish (a live view for long waits)."""
    from deployctl.redaction import redact

    console = ui.console(stderr=True)
    last_progress: dict = {}

    def on_event(kind: str, step, message: str) -> None:
        if ui.quiet:
            return
        message = redact(message)  # a container's last log line (a health wait), an error's words
        target = escape(f"{step.stage} {step.host} {step.container or ''}".strip())
        if kind == "progress":
            if message and last_progress.get(target) != message:
                last_progress[target] = message
                console.print(f"  [dim]{target}: {escape(message)}[/]")
            return
        style = style_of(_EVENT_STYLE, kind)
        console.print(f"[{style}]{escape(f'{kind:<6}')}[/] {target}" + (f" — {escape(message)}" if message else ""))
        if kind == "start" and ui.verbose:  # what the step runs: argv as data, secrets by their label
            for item in step.work:
                console.print(f"         [dim]{escape(item.display())}[/]")

    return on_event
