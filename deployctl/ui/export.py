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
