"""`deployctl status`: per instance host, role, devices, port, container state, health, image; weights identity.
Exit 0 when any container of the deployment exists (missing and unhealthy ones show as such in the table); 3 when
none exists on any host: "not deployed"."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def weights_identity(spec, facts) -> dict | None:
    """Whether every host that runs an instance holds the same weights (manifest digest), or None without weights."""
    if not spec.weights.dest:
        return None
    from deployctl.plan.weights_stage import weights_hosts
    from deployctl.weights.manifest import manifest_digest

    digests = {name: manifest_digest(facts[name].weights.manifest) if facts[name].weights else None
               for name in weights_hosts(spec) if name in facts}
    values = set(digests.values())
    return {"identical": len(values) == 1 and None not in values, "hosts": digests}


def weights_line(weights: dict) -> str:
    """Synced (where), not synced on which hosts, or which digests differ: one host can never "differ"."""
    hosts = weights["hosts"]
    if weights["identical"]:
        digest = next(iter(hosts.values()))[:19]
        return (f"weights: identical on every host ({digest})" if len(hosts) > 1
                else f"weights: synced on {next(iter(hosts))} ({digest})")
    held = {h: d for h, d in hosts.items() if d}
    missing = [h for h, d in hosts.items() if not d]
    parts = []
    if missing:
        parts.append(f"weights not synced on {', '.join(missing)}")
    if len(set(held.values())) > 1:
        parts.append("weights differ between hosts — " + ", ".join(f"{h}: {d[:19]}" for h, d in held.items()))
    return "[yellow]" + "; ".join(parts) + "[/]; run `deployctl weights sync`"


def run(args, ui) -> int:
    from deployctl.gather import gather_state
    from deployctl.hosts import connect_options, connected
    from deployctl.plan.status import is_deployed, status_rows
    from deployctl.spec.load import load_spec
    from deployctl.ui import escape, render_status

    spec = load_spec(args.spec, unresolved_env="allow")  # env values are never sent here
    if getattr(args, "timeline", False):
        return timeline(spec, args, ui)
    with connected(spec, options=connect_options(args, ui)) as transports:
        # one round trip per host: the containers, a one-token generate on each API server (a hang behind a
        # green /health shows as `hung`) and, where weights are synced, the manifest
        facts = gather_state(spec, transports, stages=frozenset({"containers", "liveness", "weights"}), strict=False,
                             hang_after=args.hang_timeout)
    rows = status_rows(spec, facts)
    deployed = is_deployed(rows)
    weights = weights_identity(spec, facts)
    if ui.json:
        ui.emit_json({"deployment": spec.name, "deployed": deployed, "instances": rows,
                      **({"weights": weights} if weights else {})})
    elif deployed:
        render_status(ui, spec, rows, title=spec.name)
    else:
        hosts = ", ".join(sorted({row["host"] for row in rows}))
        ui.print(f"[yellow]{spec.name}: not deployed[/] — none of its {len(rows)} container(s) exists on "
                 f"{hosts}; `deployctl up {escape(str(spec.source or 'SPEC'))}` deploys it")
    if weights and not ui.json:
        ui.print(weights_line(weights))
    return ExitStatus.OK if deployed else ExitStatus.NOT_THERE


def timeline(spec, args, ui) -> int:
    """`status --timeline`: the newest `up` in the history (first host) that recorded its time to serve, drawn per
    host and phase; exit 3 when there is none."""
    from deployctl.core import Command
    from deployctl.hosts import connect_options, connected
    from deployctl.lock import history_path, newest_time_to_serve
    from deployctl.ui import escape
    from deployctl.ui.timeline import render_timeline

    first = spec.first_host.name
    with connected(spec, options=connect_options(args, ui), hosts=(spec.first_host,)) as transports:
        result = transports[first].run(Command(("tail", "-n", "200", history_path(spec.remote_state_dir)),
                                               check=False), timeout=30)
    record, skipped = newest_time_to_serve(result.stdout if result.ok else "")
    from deployctl.redaction import redact

    skipped = [redact(problem) for problem in skipped]  # they quote the host's file
    for problem in skipped:  # a damaged record is refused, said, and an older sound one drawn
        ui.info(f"[yellow]{first}: {escape(problem)}: not drawn[/]")
    if ui.json:
        ui.emit_json({"deployment": spec.name, "up": record, **({"skipped": skipped} if skipped else {})})
    elif record is None:
        ui.print(f"[yellow]{spec.name}: no `up` with a time-to-serve ledger in the history on {first}[/]")
    else:
        render_timeline(ui, spec.name, record)
    return ExitStatus.OK if record is not None else ExitStatus.NOT_THERE
