"""`bench`'s screen: the results table and the regressions against a baseline."""

from __future__ import annotations


def render_table(console, document: dict, title: str = "") -> None:
    """One row per run: load, token lengths, outcomes, throughput and the latency percentiles."""
    from rich.table import Table

    from deployctl.bench.report import table_rows
    from deployctl.ui import keep_numbers_whole

    header, rows = table_rows(document)
    table = Table(title=title or None, title_justify="left")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    keep_numbers_whole(table, *header)
    console.print(table)


def render_regressions(ui, regressions, max_regression: float) -> None:
    """The runs that regressed beyond the threshold (stderr: stdout keeps the results)."""
    from rich.table import Table

    from deployctl.ui import keep_numbers_whole

    table = Table(title=f"regressions beyond {max_regression:g}%", title_justify="left")
    for column in ("run", "metric", "baseline", "now", "change"):
        table.add_column(column, justify="right")
    for r in regressions:
        table.add_row(r.run, r.metric, f"{r.baseline:.2f}", f"{r.current:.2f}", f"{r.change_pct:+.1f}%")
    keep_numbers_whole(table, "baseline", "now", "change")
    ui.console(stderr=True).print(table)
