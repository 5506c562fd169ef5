"""`tune`'s screen output: the ranked table of candidates, and the UI each nested `up` and bench speak through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployctl.ui import UI, escape


@dataclass
class StepUI(UI):
    """A nested command's UI: its tables and lines go to stderr, its JSON document nowhere (tune prints one)."""

    def console(self, stderr: bool = False):
        return super().console(stderr=True)  # stdout holds tune's own table or document only

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if not self.quiet:
            self.console().print(*objects, **kwargs)

    def emit_json(self, document: Any) -> None:
        self.emitted = True


def step_ui(ui: UI) -> StepUI:
    return StepUI(output="table", verbose=ui.verbose, quiet=ui.quiet, color=ui.color)


def render_tune(ui: UI, document: dict) -> None:
    """The ranked candidates (best first), what was pruned, and the outcome."""
    from rich.table import Table

    slo = ", ".join(f"{name} <= {limit:g} ms" for name, limit in document["slo"].items())
    rate = (document.get("traffic") or {}).get("rate")
    slo += f" at {rate:g} req/s or more" if rate else ""
    table = Table(title=f"tune {document['deployment']}: {slo} (best first)", title_justify="left")
    for column in ("rank", "candidate", "cards", "meets SLO", f"max {document['by']}", "goodput req/s",
                   "per card", "card util/mem %", "bound by", "deploy s", "tried because"):
        table.add_column(column, justify="right" if column in ("rank", "cards", "goodput req/s", "per card",
                                                              "card util/mem %", "deploy s") else "left")
    for index, record in enumerate(document["candidates"], 1):
        meets = "yes" if record["meets_slo"] else ("[red]failed[/]" if record["status"] == "failed" else "no")
        deploy = record.get("time_to_serve_s")
        table.add_row(str(index), escape(record["label"]) + (" [dim](reused)[/]" if record.get("reused") else ""),
                      str(record["cards"]), meets, "-" if record["max_load"] is None else f"{record['max_load']:g}",
                      f"{record['goodput_rps']:.2f}", f"{record['goodput_per_card']:.2f}",
                      _devices(record.get("telemetry")),
                      escape(record["error"] or record["binding"]), "-" if deploy is None else f"{deploy:.1f}",
                      escape(record["reason"]))
    ui.print(table)
    pruned = document["pruned"]
    example = f", e.g. {escape(pruned[0]['label'])}: {escape(pruned[0]['reason'])}" if pruned else ""
    ui.print(f"{document['pruned_count']} candidate(s) pruned by the spec's rules before any deploy{example}")
    ui.print(f"search: {escape(document['stopped'])}")
    if document["winner"]:
        ui.print(f"[green]best: {escape(document['winner'])}[/], written to {escape(document['tuned_spec'] or '-')}")
    ui.print(f"deployed now: {escape(document['deployed'])}; results in {escape(document['results_dir'])}")


def _devices(telemetry) -> str:
    """Mean utilisation and peak memory of the candidate's cards over its bench ("-" where not sampled)."""
    telemetry = telemetry or {}
    return "/".join("-" if telemetry.get(k) is None else f"{telemetry[k]:.0f}"
                    for k in ("device_util_mean_pct", "device_mem_max_pct"))
