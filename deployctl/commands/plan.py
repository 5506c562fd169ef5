"""`deployctl plan`: what `up` would do, step by step, commands as argv; nothing runs."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def run(args, ui) -> int:
    from deployctl import deploy
    from deployctl.commands.up import _plan, require_runnable
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_plan

    spec = load_spec(args.spec)
    require_runnable(spec)
    with deploy.connected(spec, options=deploy.connect_options(args, ui)) as transports:
        plan, _ = _plan(spec, transports, frozenset(), ui)
    render_plan(ui, plan)
    return ExitStatus.OK
