"""`deployctl down`: remove this deployment's containers (found by label) and the files deployctl wrote for it on
its hosts (env files of secrets, ranktables, ...), and nothing else: the history stays."""

from __future__ import annotations

from deployctl.errors import ExitStatus

DOWN_STAGES = frozenset({"containers", "files"})  # what down gathers: the containers, which of its files exist


def parse_skip(text: str) -> frozenset[str]:
    from deployctl.errors import UsageError

    skip = frozenset(s.strip() for s in text.split(",") if s.strip())
    if skip - {"hooks"}:
        raise UsageError(f"--skip: unknown stage {sorted(skip - {'hooks'})[0]!r} (down skips only: hooks)")
    return skip


def run(args, ui) -> int:
    from deployctl.execute import Executor
    from deployctl.gather import gather_state
    from deployctl.hosts import connect_options, connected
    from deployctl.lock import DeployLock
    from deployctl.plan.down import plan_down, removed_paths
    from deployctl.spec.load import load_spec
    from deployctl.commands.up import run_hooks
    from deployctl.plan.hooks import after_failure, split
    from deployctl.ui import confirm_or_refuse, progress_printer, render_plan, render_report, render_warning

    skip = parse_skip(getattr(args, "skip", "") or "")
    # env values are never sent to a container here; a hook's are, so they must resolve when hooks run
    spec = load_spec(args.spec, unresolved_env="allow")
    if "hooks" not in skip and any(h.env for h in spec.hooks):
        spec = load_spec(args.spec)
    grace = getattr(args, "shutdown_timeout", None)
    with connected(spec, options=connect_options(args, ui)) as transports:
        if args.dry_run:
            render_plan(ui, plan_down(spec, gather_state(spec, transports, stages=DOWN_STAGES), grace, skip))
            return ExitStatus.OK
        first = transports[spec.first_host.name]
        with DeployLock(first, spec.remote_state_dir, "down") as lock:
            hooks, after, result = [], None, "failed"
            try:
                plan = plan_down(spec, gather_state(spec, transports, stages=DOWN_STAGES), grace, skip)
                containers = [s.container for s in plan.steps if s.container]
                if containers:  # files alone serve nothing: removing them needs no yes
                    confirm_or_refuse(f"remove {len(containers)} container(s) of {spec.name}", args.yes)
                before, body, post = split(plan)
                refused = run_hooks(before, transports, ui, None, hooks, "pre_down", raise_error=False)
                if refused is not None:  # nothing removed: exit 3, as a failed check
                    result = "pre_down failed"
                    raise refused
                from deployctl.commands.monitor import regenerate

                # `monitor:`: the target lists empty (and no rules) before a server stops, so Prometheus drops the
                # targets instead of seeing them fail (every DeployctlRankDown went pending during `down`)
                regenerate(spec, transports, ui, deployed=False)
                report = Executor(transports, on_event=progress_printer(ui)).execute(body)
                result = "failed" if report.failed else "ok"
                if report.failed and plan.on_failure:
                    failed_hook = run_hooks(after_failure(plan, "failed", report.error.message if report.error
                                                          else "down failed"), transports, ui, None, hooks,
                                            "on_failure", raise_error=False)
                    if failed_hook is not None:
                        render_warning(ui, failed_hook)
                elif not report.failed:
                    after = run_hooks(post, transports, ui, None, hooks, "post_down", raise_error=False)
                    result = "post_down failed" if after is not None else result
            finally:
                lock.history = {"action": "down", "spec_digest": spec.digest, "result": result,
                                **({"hooks": hooks} if hooks else {})}
        if report.failed:  # what still runs is monitored again
            regenerate(spec, transports, ui)
    render_report(ui, report)
    files = [{"host": s.host, "paths": list(removed_paths(s))} for s in plan.steps if s.stage == "files"]
    if ui.json and after is None:  # a failed post_down: the error's document instead
        ui.emit_json({"deployment": spec.name, "removed": containers, "files": files})
    elif not plan.changed:
        ui.print(f"{spec.name}: no containers or files to remove")
    if report.failed:
        raise report.error
    if after is not None:  # removed, but the user's post_down failed
        raise after
    return ExitStatus.OK
