"""`deployctl weights sync`: the weights stage of `up`'s plan (fetch what each host lacks), and nothing else."""

from __future__ import annotations

from deployctl.errors import ExitStatus, UsageError

WEIGHTS_STAGES = frozenset({"weights"})


def sync(args, ui) -> int:
    from deployctl.hosts import connect_options, connected
    from deployctl.plan.weights_stage import weights_hosts
    from deployctl.spec.load import load_spec
    from deployctl.ui.events import up_events

    spec = load_spec(args.spec)
    if not spec.weights.dest:
        raise UsageError("weights.dest is not set", hint="set weights.dest: the model directory on every host")
    hosts = [spec.host(name) for name in weights_hosts(spec)]
    with connected(spec, options=connect_options(args, ui), hosts=hosts) as transports, up_events(ui) as on_event:
        rows = sync_weights(spec, transports, dry_run=args.dry_run, on_wait=ui.info, on_event=on_event)
    digests = {row["manifest_digest"] for row in rows}
    identical = len(digests) == 1 and None not in digests
    document = {"deployment": spec.name, "source": spec.weights.source, "hosts": rows, "identical": identical,
                **({"dry_run": True} if args.dry_run else {})}
    if ui.json:
        ui.emit_json(document)
    else:
        from deployctl.ui.events import render_weights

        render_weights(ui, document, dry_run=args.dry_run)
    return ExitStatus.OK


def sync_weights(spec, transports, *, dry_run: bool = False, on_wait=None, on_event=None) -> list[dict]:
    """Plan the weights stage, run it (unless `dry_run`), and say per host what it holds: the contract's rows."""
    from deployctl.execute import Executor
    from deployctl.gather import gather_state
    from deployctl.prepare import prepare

    prepared = prepare(spec, transports, stages=WEIGHTS_STAGES, on_wait=on_wait, allow_unlisted=False)
    outcomes, facts = {}, prepared.facts
    if not dry_run and prepared.plan.changed:
        busy = [s.host for s in prepared.plan.steps if s.changes]
        if on_wait is not None:
            on_wait(f"weights: {prepared.inputs.listing.source.text} -> {spec.weights.dest} on {', '.join(busy)}")
        report = Executor(transports, on_event=on_event, presign=prepared.presign).execute(prepared.plan)
        if report.interrupted:
            raise KeyboardInterrupt
        if report.failed:
            raise report.error
        outcomes = {o.step.host: o for o in report.outcomes}
        facts = gather_state(spec, transports, stages=WEIGHTS_STAGES)  # what each host holds now
    return host_rows(prepared, facts, outcomes, dry_run=dry_run)


def host_rows(prepared, facts, outcomes, *, dry_run: bool) -> list[dict]:
    """What each host holds after the sync (or, dry, what it would transfer)."""
    from deployctl.weights.manifest import manifest_digest

    listing = prepared.inputs.listing
    planned = {s.host: sum(a.bytes for a in s.actions) for s in prepared.plan.steps}
    rows = []
    for host, host_facts in facts.items():
        manifest = host_facts.weights.manifest if host_facts.weights else {}
        outcome = outcomes.get(host)
        row = {"host": host, "files": len(manifest), "bytes": sum(int(e["size"]) for e in manifest.values()),
               "transferred_bytes": outcome.transferred if outcome else 0,
               "seconds": round(outcome.seconds.get(host, 0.0), 3) if outcome else 0.0,
               "manifest_digest": manifest_digest(manifest)}
        if dry_run:
            row.update(files=len(listing.objects), bytes=sum(o.size for o in listing.objects),
                       to_transfer_bytes=planned.get(host, 0))
        rows.append(row)
    return rows
