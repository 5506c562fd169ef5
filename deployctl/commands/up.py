"""`deployctl up`: checks -> image -> weights -> ranktables -> prefill/decode -> health -> scheduler -> smoke."""

from __future__ import annotations

import json

from deployctl.errors import ExitStatus, HostError, UsageError

STAGES = ("checks", "image", "weights")


def parse_skip(text: str) -> frozenset[str]:
    skip = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(skip - set(STAGES))
    if unknown:
        raise UsageError(f"--skip: unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    return skip


def confirm(plan, args, ui) -> None:
    """Replacing or removing running containers needs --yes, or a yes at a terminal."""
    from deployctl.ui import confirm_or_refuse

    risky = [s for s in plan.steps if s.action in ("replace", "remove") and s.stage == "stop"]
    if risky:
        names = ", ".join(f"{s.container} on {s.host} ({s.action}: {s.reason})" for s in risky)
        confirm_or_refuse(names, getattr(args, "yes", False))


def run(args, ui) -> int:
    from deployctl import deploy
    from deployctl.lock import DeployLock
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_plan, render_report, render_status

    skip = parse_skip(args.skip)
    spec = load_spec(args.spec)
    require_runnable(spec)
    if spec.image.build and "image" not in skip:
        from deployctl.image.fetch import require_local_package

        require_local_package(spec)  # before any host is touched
    with deploy.connected(spec, options=deploy.connect_options(args, ui)) as transports:
        if args.dry_run:
            plan, _ = _plan(spec, transports, skip, ui)
            render_plan(ui, plan)
            return ExitStatus.OK
        first = transports[spec.first_host.name]
        with DeployLock(first, spec.remote_state_dir, "up", wait=args.lock_wait) as lock:
            result = "failed"
            try:
                for stage in sorted(skip):
                    ui.info(f"skipped stage: {stage} (--skip)")
                plan, facts = _plan(spec, transports, skip, ui)
                if _prepare_stages(spec, transports, skip, plan, ui):
                    plan, facts = _plan(spec, transports, skip, ui)  # image IDs or weights changed: plan again
                confirm(plan, args, ui)
                report = _execute(spec, plan, transports, args, ui)
                result = "ok" if not report.failed else ("interrupted" if report.interrupted else "rolled back")
                rows = deploy.read_status(spec, transports) if report.executed else deploy.status_rows(spec, facts)
                render_report(ui, report)
                if report.failed:
                    render_status(ui, spec, rows, title="state after rollback")
                    if report.interrupted:
                        raise KeyboardInterrupt
                    raise report.error or HostError(spec.first_host.name, "deploy failed")
                _finish(spec, plan, report, rows, ui)
            finally:
                lock.history = {"action": "up", "spec_digest": spec.digest, "result": result}
    if getattr(args, "bench", False):  # `up --bench`: a short bench of the endpoint just deployed
        from deployctl.bench.target import spec_endpoint
        from deployctl.commands.bench import bench_after_up

        return bench_after_up(spec, spec_endpoint(spec), ui)
    return ExitStatus.OK


def _prepare_stages(spec, transports, skip, plan, ui) -> bool:
    """checks -> image build -> weights, before any container changes; True when the plan must be redone.

    The checks guard changes: when the containers need nothing and no build or sync stage is active, nothing
    is about to change, and a re-run stays a no-op.
    """
    building = bool(spec.image.build) and "image" not in skip
    syncing = "weights" not in skip and _weights_stage() is not None
    if not (plan.changed or building or syncing):
        return False
    if "checks" not in skip:
        run_checks(spec, transports, ui)
    if building:
        from deployctl.image.stage import build_for_up

        build_for_up(spec, transports, ui)  # replaces the plan's pull of a missing image
    if syncing:
        _weights_stage()(spec, transports, ui)
    return building or syncing


def _weights_stage():
    """The weights stage of `up` (deployctl.weights.sync_for_up), None until that module exists."""
    try:
        from deployctl.weights import sync_for_up
    except ImportError:
        return None
    return sync_for_up


def require_runnable(spec) -> None:
    """`up` starts containers: it needs an image and the model directory."""
    missing = [key for key, value in (("image.name", spec.image.name), ("weights.dest", spec.weights.dest))
               if not value]
    if missing:
        raise UsageError(f"{spec.source or 'spec'}: `up` needs {' and '.join(missing)}",
                         hint="add them to the spec (see `deployctl schema`)")


def _plan(spec, transports, skip, ui):
    """Read-only: render ranktables, gather what runs, plan every container change -> (plan, facts)."""
    from deployctl import deploy
    from deployctl.plan.up import plan_up

    ranktables = deploy.render_ranktables(spec, transports)
    facts = deploy.gather_all(spec, transports)
    if spec.image.build:
        skip = skip | {"image"}  # the build stage (image build) owns the image, never a pull
    return plan_up(spec, facts, ranktables, skip=skip), facts


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
                if not result.stdout.strip():
                    continue  # a readiness probe before the smoke request prints nothing
                body = json.loads(result.stdout)
                # Triton's generate answers {"text_output"}; vLLM's OpenAI server answers choices[].
                answers[outcome.step.container] = (body["text_output"] if "text_output" in body
                                                   else body["choices"][0]["message"]["content"])
            except (ValueError, KeyError, IndexError, TypeError):
                answers[outcome.step.container] = result.stdout[:200]
    return answers
