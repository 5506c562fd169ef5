"""`diagnose`'s screen: the bundle's path, per host what failed to collect, and the top hints; the same lines
(on stderr) after a failed `up`."""

from __future__ import annotations

TOP = 3


def render_diagnose(ui, result) -> None:
    """`deployctl diagnose`: the JSON document, or the path, what could not be collected and the top hints."""
    from rich.markup import escape

    from deployctl.diagnose.signatures import top_hints

    if ui.json:
        ui.emit_json(result.to_json())
        return
    console = ui.console()
    console.print(f"bundle: [bold]{escape(str(result.path))}[/]")
    for host in result.summary.hosts:
        collected = f"{len(host.files)} files"
        failed = "; ".join(f"{items}: {reason}" for reason, items in _by_reason(host.failed))
        console.print(f"  {escape(host.host)}: {collected}" + (f", [yellow]not collected[/]: {escape(failed)}"
                                                               if failed else ""))
    _hints(console, top_hints(list(result.hints), TOP), len(result.hints))


def render_bundle_after_failure(ui, result) -> None:
    """After a failed `up` (stderr, before the error itself): where the bundle is and its top hints."""
    from rich.markup import escape

    from deployctl.diagnose.signatures import top_hints

    console = ui.console(stderr=True)
    console.print(f"diagnose bundle: [bold]{escape(str(result.path))}[/]")
    _hints(console, top_hints(list(result.hints), TOP), len(result.hints))


def render_bundle_failed(ui, message: str) -> None:
    from rich.markup import escape

    ui.console(stderr=True).print(f"[yellow]could not write the diagnose bundle:[/] {escape(message)}")


def _by_reason(failures) -> list[tuple[str, str]]:
    """Failures sharing a reason said once (eight cards' hccn_tool missing is one line)."""
    grouped: dict[str, list[str]] = {}
    for failure in failures:
        grouped.setdefault(failure.reason, []).append(failure.item)
    return [(reason, items[0] if len(items) == 1 else f"{items[0]} (+{len(items) - 1} more)")
            for reason, items in grouped.items()]


def _hints(console, hints, total: int) -> None:
    from rich.markup import escape

    if not hints:
        console.print("no known error signature matched")
        return
    for hint in hints:
        where = escape(hint.source) if hint.host == "-" else f"{escape(hint.host)}/{escape(hint.source)}"
        console.print(f"[bold red]{escape(hint.id)}[/] in {where}: {escape(hint.line)}")
        console.print(f"  [cyan]fix:[/] {escape(hint.hint)}")
    if total > len(hints):
        console.print(f"({total - len(hints)} more in summary.md)")
