"""The time-to-serve ledger on screen: one line after `up`, and `status --timeline`'s chart per host and phase."""

from __future__ import annotations

from deployctl.plan.ledger import PHASE_LABELS

COLOURS = {"prepare": "grey50", "image_build": "magenta", "image_pull": "magenta", "image_ship": "magenta",
           "weights_sync": "blue", "compile_cache": "cyan", "container_start": "yellow",
           "weights_loaded": "green", "graph_compiled": "red", "server_ready": "bright_green",
           "first_token": "bright_cyan"}
WIDTH = 60


def render_ledger_line(ui, ledger: dict) -> None:
    """`time to serve 12.3 s: weights sync 4.1 s, graph compiled 3.0 s, ...` (the largest phases first)."""
    phases = sorted(((s, p) for p, s in ledger["phases"].items() if s >= 0.05), reverse=True)
    parts = ", ".join(f"{PHASE_LABELS.get(p, p)} {s:.1f} s" for s, p in phases[:5])
    ui.print(f"time to serve [bold]{ledger['wall_s']:.1f} s[/]: {parts} (`deployctl status --timeline` draws it)")


def render_timeline(ui, name: str, record: dict) -> None:
    """Per host, each phase as a bar placed at its offset from the start of `up`; then the totals."""
    from rich.table import Table
    from rich.text import Text

    from deployctl.ui import escape

    # the record was read from a host (lock.py ledger_problem checked its numbers): its words are shown, not read
    # as markup
    ledger = record["time_to_serve"]
    wall = max(ledger["wall_s"], 1e-9)
    scale = WIDTH / wall
    table = Table(title=escape(f"{name}: time to serve {wall:.1f} s ({record.get('time', '')}, "
                               f"{record.get('result', '')})"))
    for column in ("host", "phase", "instance", "start s", "seconds", "timeline"):
        table.add_column(column)
    for host, rows in sorted(ledger.get("hosts", {}).items()):
        for row in rows:
            if row["seconds"] < 0.005:
                continue
            start = min(int(row["start_s"] * scale), WIDTH - 1)
            length = max(1, int(round(row["seconds"] * scale)))
            bar = Text(" " * start)
            bar.append("█" * min(length, WIDTH - start if WIDTH > start else 1), style=COLOURS.get(row["phase"], "white"))
            table.add_row(escape(host), escape(PHASE_LABELS.get(row["phase"], row["phase"])),
                          escape(row.get("instance", "")),
                          f"{row['start_s']:.2f}", f"{row['seconds']:.2f}", bar)
    ui.print(table)
    if record.get("passed_over"):  # the timeline the user asks about is the deploy's, not a re-run's
        ui.print(f"the newest `up` that changed something; {record['passed_over']} later `up`(s) changed nothing "
                 "and are not drawn", markup=False)
    elif record.get("changed") is False:
        ui.print("this `up` changed nothing (no `up` in the history deployed anything)", markup=False)
    totals = Table(title="the whole, phase by phase (they add up to the wall time)")
    for column in ("phase", "seconds", "share"):
        totals.add_column(column)
    for phase, seconds in ledger["phases"].items():
        totals.add_row(escape(PHASE_LABELS.get(phase, phase)), f"{seconds:.2f}", f"{100 * seconds / wall:.0f} %")
    totals.add_row("[bold]wall[/]", f"[bold]{wall:.2f}[/]", "100 %")
    ui.print(totals)
