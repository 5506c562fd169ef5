"""The live view of an executing plan: one line per step, stage summaries, weight transfer bars (stderr)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


class TransferBars:
    """Bytes, rate and ETA per host while weights move; opened on the first progress line, closed at the end."""

    def __init__(self, ui) -> None:
        self.ui = ui
        self.progress = None
        self.tasks: dict[str, int] = {}

    def line(self, host: str, line: str) -> None:
        from deployctl.weights.progress import parse_progress

        parsed = parse_progress(line)
        if parsed is None or self.ui.quiet or self.ui.json:
            return
        if self.progress is None:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.progress = Progress(TextColumn("{task.description:<12}"), BarColumn(), DownloadColumn(),
                                     TransferSpeedColumn(), TimeRemainingColumn(),
                                     console=self.ui.console(stderr=True), transient=False)
            self.progress.start()
        if host not in self.tasks:
            self.tasks[host] = self.progress.add_task(host, total=None, start=True)
        self.progress.update(self.tasks[host], completed=parsed[0], total=parsed[1])

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
            self.tasks.clear()


@contextmanager
def up_events(ui) -> Iterator:
    """An on_event callback for the executor: step lines, `stage X: ...` summaries and transfer bars."""
    from deployctl.ui import escape, progress_printer

    printer = progress_printer(ui)
    bars = TransferBars(ui)

    def on_event(kind: str, step, message: str) -> None:
        if kind == "transfer":
            bars.line(step.host, message)
            return
        if kind == "stage":
            bars.close()
            ui.info(f"stage {escape(message)}")
            return
        printer(kind, step, message)

    try:
        yield on_event
    finally:
        bars.close()


def render_weights(ui, document: dict, *, dry_run: bool) -> None:
    """`weights sync`'s table: per host files, bytes, what moved (or would), seconds, manifest digest."""
    from rich.table import Table

    from deployctl.ui import keep_numbers_whole

    table = Table(title=f"{document['deployment']}: weights {'(dry run)' if dry_run else ''}".strip())
    for column in ("host", "files", "bytes", "to transfer" if dry_run else "transferred", "seconds", "manifest"):
        table.add_column(column)
    for row in document["hosts"]:
        moved = row["to_transfer_bytes"] if dry_run else row["transferred_bytes"]
        table.add_row(row["host"], str(row["files"]), str(row["bytes"]), str(moved), f"{row['seconds']:.2f}",
                      (row["manifest_digest"] or "-")[:19])
    keep_numbers_whole(table, "files", "bytes", "to transfer", "transferred", "seconds")
    ui.print(table)
    ui.print("[green]all hosts hold identical weights[/]" if document["identical"] else "[yellow]hosts differ[/]")
