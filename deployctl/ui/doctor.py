"""The doctor's screen: its table of checks and the lines of --fix."""

from __future__ import annotations

from deployctl.doctor.report import HostChecks
from deployctl.plan.findings import FAIL, WARN


_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}


def table(reports: tuple[HostChecks, ...], title: str = "doctor"):
    """A rich Table: one row per check per host; the fix column says what to do about a FAIL or WARN."""
    from rich.markup import escape
    from rich.table import Table

    out = Table(title=title, title_justify="left", show_lines=False)
    for column in ("host", "check", "status", "observed", "fix"):
        out.add_column(column, overflow="fold")
    for report in reports:
        for index, finding in enumerate(report.findings):
            status = f"[{_STYLE[finding.status]}]{finding.status}[/]"
            fix = finding.fix if finding.status in (FAIL, WARN) and finding.fix else ""
            if finding.status == FAIL and not fix:
                fix = f"expected {finding.expected}"
            out.add_row(escape(report.host) if index == 0 else "", finding.name, status,
                        escape(finding.observed), escape(fix or ""), end_section=index == len(report.findings) - 1)
    return out


def say_fixes(ui, outcomes) -> None:
    """What --fix did on each host, or that nothing needed it."""
    from rich.markup import escape

    if not outcomes:
        ui.info("--fix: nothing to fix (ip_forward is 1, and host tuning is set wherever it is checked)")
    for outcome in outcomes:
        for action in outcome.actions:
            ui.info(escape(f"--fix: {outcome.host}: {action}"))
        if outcome.error:
            ui.info(escape(f"--fix: {outcome.host}: FAILED: {outcome.error}"))
