"""`deployctl image build`: the image stages of `up`'s plan (build, ship or skip per host), and nothing else."""

from __future__ import annotations

from deployctl.errors import ExitStatus, UsageError

IMAGE_STAGES = frozenset({"image"})


def build(args, ui) -> int:
    from deployctl.hosts import connect_options, connected
    from deployctl.prepare import load_build_inputs, prepare
    from deployctl.spec.load import load_spec

    spec = load_spec(args.spec)
    if spec.image.build is None or not spec.image.name:
        raise UsageError(f"{spec.source or 'spec'}: `image build` needs image.name and image.build",
                         hint="add image.build: {base: ..., packages: ...} to the spec")
    inputs = load_build_inputs(spec)  # the package is checked before any host is touched
    hosts = spec.used_hosts or spec.hosts
    with connected(spec, options=connect_options(args, ui), hosts=hosts) as transports:
        prepared = prepare(spec, transports, stages=IMAGE_STAGES, build_inputs=inputs)
        seconds, facts = {}, prepared.facts
        if not args.dry_run and prepared.plan.changed:
            seconds = _execute(prepared.plan, transports, ui)
            facts = prepare(spec, transports, stages=IMAGE_STAGES, skip=frozenset({"image"})).facts
    render(ui, document(spec, prepared, facts, seconds, dry_run=args.dry_run), dry_run=args.dry_run)
    return ExitStatus.OK


def _execute(plan, transports, ui) -> dict[str, float]:
    from deployctl.execute import Executor
    from deployctl.ui.events import up_events

    with up_events(ui) as on_event:
        report = Executor(transports, on_event=on_event).execute(plan)
    if report.interrupted:
        raise KeyboardInterrupt
    if report.failed:
        raise report.error
    return {host: s for outcome in report.outcomes for host, s in outcome.seconds.items()}


def document(spec, prepared, facts, seconds: dict[str, float], *, dry_run: bool) -> dict:
    """The contract's `image build --output json`: per host build / ship / skip, why, the image ID after."""
    from deployctl.plan.image_stage import build_actions

    actions = build_actions(spec, prepared.facts, prepared.inputs.build)
    digests = sorted({(f.image.inputs if f.image else None) for h, f in facts.items()
                      if h in {a.host for a in actions}} - {None}) if not dry_run else []
    digests = digests or sorted({a.inputs for a in actions if a.inputs})
    return {
        "image": spec.image.name,
        "inputs": digests[0] if len(digests) == 1 else (digests or None),
        "hosts": [{"host": a.host, "action": a.action,
                   "image_id": facts[a.host].image.image_id if facts[a.host].image else None,
                   "seconds": round(seconds.get(a.host, 0.0), 3), "reason": a.reason} for a in actions],
        **({"dry_run": True} if dry_run else {}),
    }


def render(ui, document: dict, *, dry_run: bool) -> None:
    if ui.json:
        ui.emit_json(document)
        return
    verb = {"build": "would build", "ship": "would ship", "skip": "skip"} if dry_run else \
        {"build": "built", "ship": "shipped", "skip": "skipped"}
    for row in document["hosts"]:
        took = f" in {row['seconds']:.1f} s" if row["seconds"] and not dry_run else ""
        ui.print(f"{row['host']}: {verb[row['action']]}{took} — {row['reason']}")
    if not dry_run:
        ui.print(f"{document['image']}: inputs {document['inputs']}")
