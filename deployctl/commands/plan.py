"""`deployctl plan`: every step `up` would take — image builds and ships, weight transfers with their bytes,
files, containers (commands as argv), smoke requests; nothing runs."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def run(args, ui) -> int:
    from deployctl.commands.up import parse_skip, require_runnable
    from deployctl.hosts import connect_options, connected
    from deployctl.prepare import prepare
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_plan

    skip = parse_skip(args.skip)
    spec = load_spec(args.spec)
    require_runnable(spec)
    with connected(spec, options=connect_options(args, ui)) as transports:
        from deployctl.commands.up import plan_options

        plan = prepare(spec, transports, skip=skip, on_wait=ui.info, **plan_options(args)).plan
    render_plan(ui, plan)
    return ExitStatus.OK
