"""`deployctl status`: per instance host, role, devices, port, container state, health, image."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def run(args, ui) -> int:
    from deployctl import deploy
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_status

    spec = load_spec(args.spec)
    with deploy.connected(spec, accept_new_host_keys=args.accept_new_host_keys) as transports:
        rows = deploy.read_status(spec, transports)
    if ui.json:
        ui.emit_json({"deployment": spec.name, "instances": rows})
    else:
        render_status(ui, spec, rows, title=spec.name)
    return ExitStatus.OK
