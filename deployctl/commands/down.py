"""`deployctl down`: remove this deployment's containers (found by label) and nothing else."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def run(args, ui) -> int:
    from deployctl.execute import Executor
    from deployctl.gather import gather_state
    from deployctl.hosts import connect_options, connected
    from deployctl.lock import DeployLock
    from deployctl.plan.down import plan_down
    from deployctl.spec.load import load_spec
    from deployctl.ui import confirm_or_refuse, progress_printer, render_report

    spec = load_spec(args.spec, unresolved_env="allow")  # env values are never sent here
    with connected(spec, options=connect_options(args, ui)) as transports:
        first = transports[spec.first_host.name]
        with DeployLock(first, spec.remote_state_dir, "down") as lock:
            plan = plan_down(spec, gather_state(spec, transports, stages=frozenset({"containers"})))
            if plan.changed:
                confirm_or_refuse(f"remove {len(plan.steps)} container(s) of {spec.name}", args.yes)
            report = Executor(transports, on_event=progress_printer(ui)).execute(plan)
            lock.history = {"action": "down", "spec_digest": spec.digest,
                            "result": "failed" if report.failed else "ok"}
    render_report(ui, report)
    if ui.json:
        ui.emit_json({"deployment": spec.name, "removed": [s.container for s in plan.steps]})
    elif not plan.changed:
        ui.print(f"{spec.name}: no containers to remove")
    if report.failed:
        raise report.error
    return ExitStatus.OK
