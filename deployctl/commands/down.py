"""`deployctl down`: remove this deployment's containers (found by label) and the files deployctl wrote for it on
its hosts (env files of secrets, ranktables, ...), and nothing else: the history stays."""

from __future__ import annotations

from deployctl.errors import ExitStatus

DOWN_STAGES = frozenset({"containers", "files"})  # what down gathers: the containers, which of its files exist


def run(args, ui) -> int:
    from deployctl.execute import Executor
    from deployctl.gather import gather_state
    from deployctl.hosts import connect_options, connected
    from deployctl.lock import DeployLock
    from deployctl.plan.down import plan_down, removed_paths
    from deployctl.spec.load import load_spec
    from deployctl.ui import confirm_or_refuse, progress_printer, render_plan, render_report

    spec = load_spec(args.spec, unresolved_env="allow")  # env values are never sent here
    grace = getattr(args, "shutdown_timeout", None)
    with connected(spec, options=connect_options(args, ui)) as transports:
        if args.dry_run:
            render_plan(ui, plan_down(spec, gather_state(spec, transports, stages=DOWN_STAGES), grace))
            return ExitStatus.OK
        first = transports[spec.first_host.name]
        with DeployLock(first, spec.remote_state_dir, "down") as lock:
            plan = plan_down(spec, gather_state(spec, transports, stages=DOWN_STAGES), grace)
            containers = [s.container for s in plan.steps if s.container]
            if containers:  # files alone serve nothing: removing them needs no yes
                confirm_or_refuse(f"remove {len(containers)} container(s) of {spec.name}", args.yes)
            from deployctl.commands.monitor import regenerate

            # `monitor:`: the target lists empty (and no rules) before a server stops, so Prometheus drops the
            # targets instead of seeing them fail (every DeployctlRankDown went pending during `down`)
            regenerate(spec, transports, ui, deployed=False)
            report = Executor(transports, on_event=progress_printer(ui)).execute(plan)
            lock.history = {"action": "down", "spec_digest": spec.digest,
                            "result": "failed" if report.failed else "ok"}
        if report.failed:  # what still runs is monitored again
            regenerate(spec, transports, ui)
    render_report(ui, report)
    files = [{"host": s.host, "paths": list(removed_paths(s))} for s in plan.steps if s.stage == "files"]
    if ui.json:
        ui.emit_json({"deployment": spec.name, "removed": containers, "files": files})
    elif not plan.changed:
        ui.print(f"{spec.name}: no containers or files to remove")
    if report.failed:
        raise report.error
    return ExitStatus.OK
