"""`image build` as one stage: check the package, check compatibility, plan, then build and ship."""

from __future__ import annotations

import time
from typing import Mapping

from deployctl.errors import UsageError
from deployctl.spec.model import Spec
from deployctl.transport import Transport


def load_inputs(spec: Spec):
    """Fetch and check the package on the control machine (exit 2 on any problem, nothing built)."""
    from deployctl.image.fetch import package_bytes
    from deployctl.image.package import read_package
    from deployctl.image.run import build_inputs

    build = spec.image.build
    if build is None or not spec.image.name:
        raise UsageError(f"{spec.source or 'spec'}: `image build` needs image.name and image.build",
                         hint="add image.build: {base: ..., packages: ...} to the spec")
    package = read_package(package_bytes(spec, build.packages), build.packages)
    return build_inputs(package, build.recipe)


def image_build(spec: Spec, transports: Mapping[str, Transport], ui, *, dry_run: bool = False,
                inputs=None) -> dict:
    """Build/ship/skip per host; returns the contract's `--output json` document."""
    from deployctl.image.plan import check_compat
    from deployctl.image.run import execute, image_ids, plan_for

    inputs = inputs or load_inputs(spec)
    facts, actions = plan_for(spec, transports, inputs)
    if spec.platform == "ascend":
        check_compat(inputs.package.version, {h: f.driver for h, f in facts.items()})
    digests = {a.inputs for a in actions if a.inputs}
    seconds: dict[str, float] = {}
    ids = {h: f.image_id for h, f in facts.items()}
    if not dry_run and any(a.action != "skip" for a in actions):
        seconds = execute(spec, transports, inputs, actions, ui)
        ids = image_ids(spec, transports, [a.host for a in actions])
        digests = {f.inputs for f in _probe_all(spec, transports, actions).values() if f.inputs} or digests
    return {
        "image": spec.image.name,
        "inputs": sorted(digests)[0] if len(digests) == 1 else (sorted(digests) or None),
        "hosts": [{"host": a.host, "action": a.action, "image_id": ids.get(a.host), "seconds":
                   round(seconds.get(a.host, 0.0), 3), "reason": a.reason} for a in actions],
        **({"dry_run": True} if dry_run else {}),
    }


def _probe_all(spec, transports, actions):
    from deployctl.gather import on_hosts
    from deployctl.image.run import probe

    return on_hosts({a.host: transports[a.host] for a in actions}, lambda t: probe(spec, t))


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


def build_for_up(spec: Spec, transports: Mapping[str, Transport], ui) -> None:
    """`up`'s image stage when image.build is set: build/ship where the inputs changed, skip the rest."""
    started = time.monotonic()
    document = image_build(spec, transports, ui)
    changed = [r["host"] for r in document["hosts"] if r["action"] != "skip"]
    ui.info(f"stage image: {'built/shipped on ' + ', '.join(changed) if changed else 'up to date everywhere'} "
            f"({time.monotonic() - started:.1f} s)")
