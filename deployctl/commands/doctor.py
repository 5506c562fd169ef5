"""`deployctl doctor`, and the same checks run by `up` before any change (checks_for_spec)."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from deployctl.errors import ChecksFailed, ExitStatus, HostError, HostKeyError


def run(args, ui) -> int:
    from deployctl.doctor.targets import plan_for_hosts, plan_for_spec

    if args.spec:
        from deployctl.hosts import know_secrets
        from deployctl.spec.load import load_spec

        spec = load_spec(args.spec)
        know_secrets(spec)
        plan = plan_for_spec(spec, tuple(args.host))
    else:
        plan = plan_for_hosts(tuple(args.host), args.identity_file, args.known_hosts)
    from deployctl.hosts import connect_options

    reports, fixes = examine(plan, ui, connect=connect_options(args), fix=args.fix)
    return render(ui, reports, fixes)


def examine(plan, ui, *, accept_new_host_keys: bool = False, fix: bool = False, connect=None):
    """Connect, gather, check; with `fix`, repair ip_forward where it FAILs (and vllm-ascend's host tuning where
    it WARNs) and check again.
    Returns (host reports, fix outcomes or None)."""
    from deployctl.doctor.fix import repairs_for, run_fixes
    from deployctl.doctor.gather import gather_facts, unreachable
    from deployctl.ui.doctor_progress import HostProgress
    from deployctl.doctor.report import host_reports
    from deployctl.transport.connect import ConnectOptions, close_all

    names = [t.host.name for t in plan.targets]
    with HostProgress(ui, names) as progress:
        transports, errors = _connect(plan, progress, connect or ConnectOptions(accept_new_host_keys))
        try:
            facts = {name: unreachable(error) for name, error in errors.items()}
            facts.update(gather_facts(plan, transports, on_host=progress.answered))
            # an unknown or changed host key: the fix is the exact command that trusts (or forgets) it
            ssh_fixes = {n: e.hint for n, e in errors.items() if isinstance(e, HostKeyError) and e.hint}
            weights = _weights_digests(plan, facts)
            reports = host_reports(plan, facts, ssh_fixes, weights)
            outcomes = None
            if fix:
                repairs = repairs_for(reports)
                chosen = {n: transports[n] for n in repairs}
                outcomes = run_fixes(chosen, repairs)
                if chosen:  # check again: the table shows the state after the repair
                    facts.update(gather_facts(plan, transports))
                    reports = host_reports(plan, facts, ssh_fixes, weights)
        finally:
            close_all(transports)
    return reports, outcomes


def _weights_digests(plan, facts):
    """Each reachable host's weights manifest digest (gathered in the same batch), when the spec's weights are
    synced by deployctl."""
    from deployctl.weights.manifest import manifest_digest

    reachable = {name: f for name, f in facts.items() if f.reachable}
    if not plan.weights_dest or not reachable:
        return None
    return {name: manifest_digest(f.weights.manifest) if f.weights else None for name, f in reachable.items()}


def _connect(plan, progress, options):
    """One transport per target, in parallel; each host reported to the live view as it connects."""
    from deployctl.transport.connect import open_transports

    def settled(name, outcome):
        if isinstance(outcome, HostError):
            progress.unreachable(name, outcome.message.partition(": ")[2] or outcome.message)
        else:
            progress.connected(name)

    return open_transports([t.host for t in plan.targets], accept_new_host_keys=options.accept_new_host_keys,
                           connect_timeout=options.timeout, on_wait=progress.waiting, on_result=settled)


def render(ui, reports, outcomes) -> int:
    """The table (stdout) or the JSON document; exit 3 when any check FAILs."""
    from deployctl.doctor.report import document, summary
    from deployctl.ui.doctor import say_fixes, table

    fixes = None if outcomes is None else [o.to_json() for o in outcomes]
    if ui.json:
        ui.emit_json(document(reports, fixes))
    else:
        if outcomes is not None:
            say_fixes(ui, outcomes)
        ui.console().print(table(reports))
        ui.print(summary(reports))
    return ExitStatus.CHECKS if any(r.failed for r in reports) else ExitStatus.OK


def checks_for_spec(spec, transports: Mapping, ui) -> None:
    """`up`'s first stage: doctor's checks on the spec's hosts over the open transports. Any FAIL renders
    the table to stderr and raises ChecksFailed (exit 3) before anything changes; WARN does not stop up."""
    from deployctl.doctor.gather import gather_facts
    from deployctl.doctor.report import failure_lines, host_reports, summary
    from deployctl.doctor.targets import plan_for_spec
    from deployctl.ui import escape
    from deployctl.ui.doctor import table

    plan = plan_for_spec(spec)
    plan = replace(plan, targets=tuple(t for t in plan.targets if t.host.name in transports))
    reports = host_reports(plan, gather_facts(plan, transports))
    if any(r.failed for r in reports):
        if not ui.quiet:
            ui.console(stderr=True).print(table(reports, title=f"checks of {spec.name}"))
        lines = failure_lines(reports)
        raise ChecksFailed(f"{summary(reports)}; nothing was changed:\n" + "\n".join("  " + l for l in lines),
                           hint=f"fix them (deployctl doctor {spec.source or 'SPEC'} shows all; --fix repairs "
                                "ip_forward), or skip with --skip checks at your own risk")
    warnings = [f"{r.host} {f.name}: {f.observed}" for r in reports for f in r.findings if f.status == "WARN"]
    ui.info(f"checks: {summary(reports)}")
    for line in warnings:
        ui.info(f"  [yellow]WARN[/] {escape(line)}")
