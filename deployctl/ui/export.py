"""`export`'s screen: the YAML stream on stdout, or the files written; --output json lists the objects."""

from __future__ import annotations

import sys


def render_export(ui, target: str, manifests, written) -> None:
    from deployctl.export.render import stream

    if ui.json:
        document = {"target": target, "objects": [m.to_json(written is not None) for m in manifests]}
        if written is None:
            document["yaml"] = stream(manifests)
        else:
            document["directory"] = str(written)
        ui.emit_json(document)
        return
    if written is None:
        sys.stdout.write(stream(manifests))
        return
    from rich.markup import escape

    console = ui.console()
    for manifest in manifests:
        console.print(f"{escape(str(written / manifest.file))}  [dim]{manifest.kind} {escape(manifest.name)}[/]")
    ui.info(f"{len(manifests)} objects for --to {target} in {written}")


def render_check(ui, options, rules) -> None:
    """`export --check`: one line per rule, its status and what was seen, then its source."""
    from deployctl.export.check import MET, NOT_MET

    if ui.json:
        ui.emit_json({"target": options.target, "npu_stack": options.npu_stack, "node_type": options.node_type,
                      "rules": [r.to_json() for r in rules]})
        return
    from rich.markup import escape

    console = ui.console()
    colour = {MET: "green", NOT_MET: "red"}
    for rule in rules:
        console.print(f"[{colour.get(rule.status, 'yellow')}]{rule.status:>14}[/]  [bold]{rule.name}[/]: "
                      f"{escape(rule.detail)}")
        console.print(f"{'':>16}[dim]source: {escape(rule.source)}[/]")
    failed = sum(1 for r in rules if r.status == NOT_MET)
    said = f"--to {options.target} --npu-stack {options.npu_stack}" + (
        f" --node-type {options.node_type}" if options.node_type else "")
    ui.info(f"{len(rules) - failed} of {len(rules)} rules met or for the cluster ({said})" if not failed
            else f"{failed} of {len(rules)} rules not met ({said})")
