"""`deployctl up`: checks -> image -> weights -> ranktables -> prefill/decode -> health -> scheduler -> smoke."""

from __future__ import annotations

import json
import sys

from deployctl.errors import DeployctlError, ExitStatus, HostError, UsageError

STAGES = ("checks", "image", "weights")


def parse_skip(text: str) -> frozenset[str]:
    skip = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(skip - set(STAGES))
    if unknown:
        raise UsageError(f"--skip: unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    return skip


def confirm(plan, args, ui) -> None:
    """Replacing or removing running containers needs --yes, or a yes at a terminal."""
    risky = [s for s in plan.steps if s.action in ("replace", "remove") and s.stage == "stop"]
    if not risky or getattr(args, "yes", False):
        return
    names = ", ".join(f"{s.container} on {s.host} ({s.action}: {s.reason})" for s in risky)
    if not sys.stdin.isatty():
        raise UsageError(f"this would {names}; refusing without a terminal",
                         hint="re-run with --yes to allow replacing or removing containers")
    answer = input(f"This will {names}. Continue? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise UsageError("cancelled: nothing was changed")


def run(args, ui) -> int:
    from deployctl import deploy
    from deployctl.lock import DeployLock, append_history
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_plan, render_report, render_status

    skip = parse_skip(args.skip)
    spec = load_spec(args.spec)
    require_runnable(spec)
    with deploy.connected(spec, accept_new_host_keys=args.accept_new_host_keys) as transports:
        if args.dry_run:
            plan = _plan(spec, transports, skip, ui)
            render_plan(ui, plan)
            return ExitStatus.OK
        first = transports[spec.first_host.name]
        with DeployLock(first, spec.remote_state_dir, "up", wait=args.lock_wait):
            result = "failed"
            try:
                _skipped_note(skip, ui)
                plan = _plan(spec, transports, skip, ui)
                confirm(plan, args, ui)
                report = _execute(spec, plan, transports, args, ui)
                result = "ok" if not report.failed else ("interrupted" if report.interrupted else "rolled back")
                rows = deploy.read_status(spec, transports)
                render_report(ui, report)
                if report.failed:
                    render_status(ui, spec, rows, title="state after rollback")
                    if report.interrupted:
                        raise KeyboardInterrupt
                    raise report.error or HostError(spec.first_host.name, "deploy failed")
                _finish(spec, plan, report, rows, ui)
            finally:
                append_history(first, spec.remote_state_dir,
                               {"action": "up", "spec_digest": spec.digest, "result": result})
    return ExitStatus.OK


def require_runnable(spec) -> None:
    """`up` starts containers: it needs an image and the model directory."""
    missing = [key for key, value in (("image.name", spec.image.name), ("weights.dest", spec.weights.dest))
               if not value]
    if missing:
        raise UsageError(f"{spec.source or 'spec'}: `up` needs {' and '.join(missing)}",
                         hint="add them to the spec (see `deployctl schema`)")


def _skipped_note(skip, ui) -> None:
    for stage in sorted(skip):
        ui.info(f"skipped stage: {stage} (--skip)")
    if "weights" not in skip:
        ui.info("stage weights: `weights sync` is not built yet; using the model directory already on the hosts")


def _plan(spec, transports, skip, ui):
    from deployctl import deploy
    from deployctl.plan.up import plan_up

    if "checks" not in skip:
        run_checks(spec, transports, ui)
    ranktables = deploy.render_ranktables(spec, transports)
    facts = deploy.gather_all(spec, transports)
    return plan_up(spec, facts, ranktables, skip=skip)


def run_checks(spec, transports, ui) -> None:
    """The doctor's checks on every host that runs an instance; any FAIL stops `up` before a change."""
    try:
        from deployctl.commands.doctor import checks_for_spec
    except ImportError:
        return
    checks_for_spec(spec, transports, ui)


def _execute(spec, plan, transports, args, ui):
    from deployctl.execute import Executor
    from deployctl.ui import progress_printer

    executor = Executor(transports, on_event=progress_printer(ui), health_timeout=args.health_timeout)
    return executor.execute(plan)


def _finish(spec, plan, report, rows, ui) -> None:
    from deployctl.ui import render_status

    endpoint_instance = spec.scheduler or spec.instances[0]
    endpoint = f"http://{spec.host(endpoint_instance.host).address}:{endpoint_instance.port}"
    answers = smoke_answers(report)
    if ui.json:
        ui.emit_json({"deployment": spec.name, "changed": plan.changed, "endpoint": endpoint,
                      "instances": rows, **({"smoke": answers} if answers else {})})
        return
    if not plan.changed:
        ui.print(f"[green]{spec.name}: nothing to do[/] — every container runs with this configuration")
    for name, answer in answers.items():
        ui.print(f"smoke request via {name}: [bold]{answer}[/]")
    render_status(ui, spec, rows, title=f"{spec.name} is serving at {endpoint}")


def smoke_answers(report) -> dict[str, str]:
    """The text each smoke request got back."""
    answers = {}
    for outcome in report.results_of("verify"):
        for result in outcome.results:
            try:
                body = json.loads(result.stdout)
                answers[outcome.step.container] = body["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                answers[outcome.step.container] = result.stdout[:200]
    return answers
