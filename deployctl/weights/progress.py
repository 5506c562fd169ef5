"""One aggregated progress display on stderr: bytes, rate and ETA per host (rich, thread-safe)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator


def parse_progress(line: str) -> tuple[int, int] | None:
    """The fetcher's `P done total` line, else None."""
    parts = line.split()
    if len(parts) == 3 and parts[0] == "P" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2])
    return None


@contextmanager
def host_progress(ui, hosts: list[str]) -> Iterator[Callable[[str], Callable[[str], None]]]:
    """Yields `for_host(name) -> on_line`; shows nothing in --quiet or --output json mode."""
    if ui.quiet or ui.json:
        yield lambda host: (lambda line: None)
        return
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    progress = Progress(TextColumn("{task.description:<12}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=ui.console(stderr=True), transient=False)
    tasks = {host: progress.add_task(host, total=None, start=True) for host in hosts}

    def for_host(host: str) -> Callable[[str], None]:
        def on_line(line: str) -> None:
            parsed = parse_progress(line)
            if parsed:
                progress.update(tasks[host], completed=parsed[0], total=parsed[1])
        return on_line

    with progress:
        yield for_host
