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


def weights_line(weights: dict) -> str:
    """Synced (where), not synced on which hosts, or which digests differ: one host can never "differ"."""
    hosts = weights["hosts"]
    if weights["identical"]:
        digest = next(iter(hosts.values()))[:19]
        return (f"weights: identical on every host ({digest})" if len(hosts) > 1
                else f"weights: synced on {next(iter(hosts))} ({digest})")
    held = {h: d for h, d in hosts.items() if d}
    missing = [h for h, d in hosts.items() if not d]
    parts = []
    if missing:
        parts.append(f"weights not synced on {', '.join(missing)}")
    if len(set(held.values())) > 1:
        parts.append("weights differ between hosts — " + ", ".join(f"{h}: {d[:19]}" for h, d in held.items()))
    return "[yellow]" + "; ".join(parts) + "[/]; run `deployctl weights sync`"


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
        ui.print(weights_line(weights))
    return ExitStatus.OK
