"""`deployctl up`: gather -> plan (image, weights, ranktables and files, containers, smoke) -> checks when
anything is to change -> execute -> status."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from deployctl.errors import ExitStatus, HostError, UsageError

STAGES = ("checks", "image", "weights", "contract", "answers", "hooks")
PREPARE_STAGES = ("image", "ship", "weights")  # what runs before a re-plan when image identities were pending


def parse_skip(text: str) -> frozenset[str]:
    skip = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(skip - set(STAGES))
    if unknown:
        raise UsageError(f"--skip: unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    return skip


def confirm(plan, args) -> None:
    """Replacing or removing running containers needs --yes, or a yes at a terminal."""
    from deployctl.ui import confirm_or_refuse

    risky = [s for s in plan.steps if s.action in ("replace", "remove") and s.stage == "stop"]
    if risky:
        names = ", ".join(f"{s.container} on {s.host} ({s.action}: {s.reason})" for s in risky)
        confirm_or_refuse(names, getattr(args, "yes", False))


def plan_options(args) -> dict:
    """The flags that shape the plan beyond the spec: the answer check's tokens, the rollout's timeouts."""
    return {"answer_tokens": args.answer_tokens, "drain_timeout": getattr(args, "drain_timeout", None),
            "shutdown_timeout": getattr(args, "shutdown_timeout", None)}


def require_runnable(spec) -> None:
    """`up` starts containers: it needs an image and the model directory."""
    missing = [key for key, value in (("image.name", spec.image.name), ("weights.dest", spec.weights.dest))
               if not value]
    if missing:
        raise UsageError(f"{spec.source or 'spec'}: `up` needs {' and '.join(missing)}",
                         hint="add them to the spec (see `deployctl schema`)")


def restarting(spec, plan) -> frozenset:
    """The containers `up` creates, replaces or removes (every one on a host still to be planned)."""
    pending = set(plan.pending)
    return frozenset({s.container for s in plan.steps if s.container and s.changes}
                     | {i.name for i in spec.instances if i.host in pending})


def run(args, ui) -> int:
    from deployctl.execute.ledger import LedgerRecorder
    from deployctl.hosts import connect_options, connected
    from deployctl.lock import DeployLock
    from deployctl.prepare import prepare
    from deployctl.spec.load import load_spec
    from deployctl.ui import render_plan, render_report, render_status

    recorder = LedgerRecorder(getattr(args, "started", None) or time.monotonic())  # the time-to-serve ledger
    skip = parse_skip(args.skip)
    spec = getattr(args, "loaded_spec", None) or load_spec(args.spec)  # tune hands a candidate's spec over
    require_runnable(spec)
    if spec.image.build and "image" not in skip:
        from deployctl.image.fetch import require_local_package

        require_local_package(spec)  # before any host is touched
    with connected(spec, options=connect_options(args, ui)) as transports:
        if args.dry_run:
            render_plan(ui, prepare(spec, transports, skip=skip, on_wait=ui.info,
                                    **plan_options(args)).plan)
            return ExitStatus.OK
        first = transports[spec.first_host.name]
        with DeployLock(first, spec.remote_state_dir, "up", wait=args.lock_wait) as lock:
            result, ledger, document, changed, hooks, after = "failed", None, None, None, [], None
            try:
                for stage in sorted(skip):
                    ui.info(f"skipped stage: {stage} (--skip)")
                prepared = prepare(spec, transports, skip=skip, on_wait=ui.info, **plan_options(args))
                changed = prepared.plan.changed
                if prepared.plan.changed and "checks" not in skip:
                    checked = time.monotonic()
                    _checks(spec, transports, ui)  # any FAIL stops here, before a change
                    recorder.span("checks", checked)
                confirm(prepared.plan, args)
                from deployctl.plan.hooks import after_failure, split

                before, body, post = split(prepared.plan)
                refused = run_hooks(before, transports, ui, recorder, hooks, "pre_up", raise_error=False)
                if refused is not None:  # nothing changed: exit 3, as a failed check
                    result = "pre_up failed"
                    raise refused
                from deployctl.commands.monitor import regenerate

                # `monitor:`: what is about to stop leaves the target lists first (listed again once it serves)
                regenerate(spec, transports, ui, leave_out=restarting(spec, prepared.plan), quiet=True)
                report, plan = _execute(spec, replace(prepared, plan=body), transports, skip, args, ui, recorder)
                hooks += report.hooks
                result = "ok" if not report.failed else ("interrupted" if report.interrupted else "rolled back")
                rows = _status(spec, transports) if report.executed else _rows(spec, prepared.facts)
                recorder.note(report)
                ledger = _ledger(spec, transports, recorder, read_logs=not report.failed)
                render_report(ui, report)
                if report.failed:
                    regenerate(spec, transports, ui, quiet=True)  # what the rollback restored is listed again
                    render_status(ui, spec, rows, title="state after rollback")
                    if report.interrupted:
                        raise KeyboardInterrupt
                    error = report.error or HostError(spec.first_host.name, "deploy failed")
                    if getattr(error, "point", "") == "post_wave":  # its wave stays done; the rollout stops there
                        result = "post_wave failed"
                    elif report.wave_failed:
                        from deployctl.errors import RolloutFailed

                        error = RolloutFailed(error, report.waves, report.waves_done, report.wave_failed)
                    if prepared.plan.on_failure:  # the user's on_failure hook, told what happened
                        failed_hook = run_hooks(after_failure(prepared.plan, result, error.message), transports, ui,
                                                recorder, hooks, "on_failure", raise_error=False)
                        if failed_hook is not None:  # said; the deploy's own error below is the news
                            from deployctl.ui import render_warning

                            render_warning(ui, failed_hook)
                    from deployctl.commands.diagnose import bundle_after_failure

                    bundle_after_failure(spec, transports, error, ui)  # never raises: the error below is the news
                    raise error
                regenerate(spec, transports, ui)  # `monitor:`: the targets follow what runs now
                after = run_hooks(post, transports, ui, recorder, hooks, "post_up", raise_error=False)
                if after is not None:  # deployed, but the user's post_up failed: the result says so, exit 1
                    result = "post_up failed"
                if post.stages:
                    ledger = recorder.ledger().to_json()  # the post_up hook's time too
                document = _finish(spec, plan, report, rows, ui, ledger)
            finally:
                lock.history = {"action": "up", "spec_digest": spec.digest, "result": result,
                                **({"changed": changed} if changed is not None else {}),  # status --timeline
                                **({"time_to_serve": ledger} if ledger else {}), **({"hooks": hooks} if hooks else {})}
        if after is not None:
            raise after
        if document is not None:  # the JSON's ledger ends after the history line and the lock's release
            document["time_to_serve"] = recorder.ledger().to_json()
            ui.emit_json(document)
    # requests a drain's deadline cut short: said by render_report, and by the exit status even with --quiet
    code = ExitStatus.DRAIN_LEFT if any(n for n in report.drain_counts.values()) else ExitStatus.OK
    if getattr(args, "bench", False):  # `up --bench`: a short bench of the endpoint just deployed
        from deployctl.commands.bench import bench_after_up
        from deployctl.plan.verify import endpoint_url

        return bench_after_up(spec, endpoint_url(spec), ui) or code
    return code


def run_hooks(plan, transports, ui, recorder, ran: list, point: str, raise_error: bool = True):
    """A plan of hooks alone (pre_*, post_*, on_failure); each run's record goes to `ran`. A failure is raised
    (`raise_error`) or said and returned; Ctrl-C is raised."""
    if not plan.stages:
        return None
    from deployctl.execute import Executor
    from deployctl.ui.events import up_events

    with up_events(ui) as on_event:
        report = Executor(transports, on_event=recorder.wrap(on_event) if recorder else on_event).execute(plan)
    ran += report.hooks
    if report.interrupted:
        raise KeyboardInterrupt
    if not report.failed:
        return None
    error = report.error or HostError("", f"{point} hook failed")
    if raise_error:
        raise error
    return error


def _checks(spec, transports, ui) -> None:
    """The doctor's checks; a FAIL writes the diagnose bundle too (what an issue about it needs) and stops `up`."""
    from deployctl.commands.diagnose import bundle_after_failure
    from deployctl.commands.doctor import checks_for_spec
    from deployctl.errors import ChecksFailed

    try:
        checks_for_spec(spec, transports, ui)
    except ChecksFailed as error:
        bundle_after_failure(spec, transports, error, ui)
        raise


def _execute(spec, prepared, transports, skip, args, ui, recorder):
    """The whole plan in one executor; where an image identity is known only after the image stage (a base or
    the image itself pulled), that stage first, then the rest planned on what the hosts hold then."""
    from deployctl.execute import Executor
    from deployctl.plan.model import Plan
    from deployctl.prepare import prepare
    from deployctl.ui.events import up_events

    with up_events(ui) as on_event:
        executor = Executor(transports, on_event=recorder.wrap(on_event), health_timeout=health_timeout(spec, args),
                            presign=prepared.presign)
        plan = prepared.plan
        if plan.pending:
            first = Plan(plan.deployment, tuple(s for s in plan.stages if s.name in PREPARE_STAGES))
            report = executor.execute(first)
            if report.failed:
                return report, plan
            from deployctl.plan.hooks import split

            plan = split(prepare(spec, transports, skip=skip | {"image", "weights"},  # its hooks: the first plan's
                                 stages=frozenset({"image", "ranktables", "containers"}),
                                 **plan_options(args)).plan)[1]
            later = executor.execute(plan)
            later.outcomes[:0] = report.outcomes
            return later, plan
        return executor.execute(plan), plan


def _rows(spec, facts):
    from deployctl.plan.status import status_rows

    return status_rows(spec, facts)


def _status(spec, transports):
    from deployctl.gather import gather_state

    return _rows(spec, gather_state(spec, transports, stages=frozenset({"containers", "liveness"})))


def _ledger(spec, transports, recorder, *, read_logs: bool) -> dict:
    """The time-to-serve ledger (plan/ledger.py) as `time_to_serve`: new servers' own logs split their start."""
    from deployctl.execute.ledger import read_milestones

    milestones = read_milestones(spec, transports, recorder.spans) if read_logs else {}
    return recorder.ledger(milestones, {i.name: i.host for i in spec.instances}).to_json()


def _finish(spec, plan, report, rows, ui, ledger=None) -> dict | None:
    """The summary on screen; with --output json, the document to print (returned: the caller adds the ledger)."""
    from deployctl.plan.verify import endpoint_url
    from deployctl.ui import render_status

    endpoint = endpoint_url(spec)
    answers = smoke_answers(report)
    if ui.json:
        return {"deployment": spec.name, "changed": plan.changed, "endpoint": endpoint,
                "instances": rows, **({"smoke": answers} if answers else {}),
                # per drained server, the requests it still held when its drain's deadline passed (null: unknown)
                "drain_left": {name: (None if n is None else int(n)) for name, n in report.drain_counts.items()}}
    if not plan.changed:
        ui.print(f"[green]{spec.name}: nothing to do[/] — every container runs with this configuration")
    for name, answer in answers.items():
        ui.print(f"smoke request via {name}: [bold]{answer}[/]")
    render_status(ui, spec, rows, title=f"{spec.name} is serving at {endpoint}")
    if ledger and plan.changed:
        from deployctl.ui.timeline import render_ledger_line

        render_ledger_line(ui, ledger)
    return None


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
    from deployctl.redaction import redact

    return {name: redact(text) for name, text in answers.items()}  # a server's words: a host's text


def health_timeout(spec, args) -> float:
    """--health-timeout, else the spec's start-up budget (health.startup_timeout or its size-scaled default)."""
    from deployctl.spec.startup import startup_budget

    return args.health_timeout if args.health_timeout is not None else float(startup_budget(spec).seconds)
