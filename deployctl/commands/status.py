"""`deployctl status`: per instance host, role, devices, port, container state, health, image; weights identity."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def weights_identity(spec, transports) -> dict | None:
    """Whether every host that runs an instance holds the same weights (manifest digest), or None without weights."""
    if not spec.weights.dest:
        return None
    from deployctl.weights import manifest_digests

    digests = manifest_digests(spec, transports)
    values = set(digests.values())
    return {"identical": len(values) == 1 and None not in values, "hosts": digests}


def run(args, ui) -> int:
    from deployctl import deploy
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_status

    spec = load_spec(args.spec, unresolved_env="allow")  # env values are never sent here
    with deploy.connected(spec, options=deploy.connect_options(args, ui)) as transports:
        rows = deploy.read_status(spec, transports)
        weights = weights_identity(spec, transports)
    if ui.json:
        ui.emit_json({"deployment": spec.name, "instances": rows, **({"weights": weights} if weights else {})})
        return ExitStatus.OK
    render_status(ui, spec, rows, title=spec.name)
    if weights:
        if weights["identical"]:
            digest = next(iter(weights["hosts"].values()))
            ui.print(f"weights: identical on every host ({digest[:19]})")
        else:
            listing = ", ".join(f"{h}: {(d or 'not synced')[:19]}" for h, d in weights["hosts"].items())
            ui.print(f"[yellow]weights differ between hosts[/] — {listing}; run `deployctl weights sync`")
    return ExitStatus.OK
