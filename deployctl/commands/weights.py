"""`deployctl weights sync`."""

from __future__ import annotations

from deployctl.errors import ExitStatus


def sync(args, ui) -> int:
    from deployctl import deploy
    from deployctl.spec.load import load_spec
    from deployctl.weights.sync import sync_weights, weights_hosts

    spec = load_spec(args.spec)
    hosts = [spec.host(name) for name in weights_hosts(spec)]
    with deploy.connected(spec, options=deploy.connect_options(args, ui), hosts=hosts) as transports:
        reports = sync_weights(spec, transports, ui, dry_run=args.dry_run)
    digests = {r.manifest_digest for r in reports}
    identical = len(digests) == 1 and None not in digests
    if ui.json:
        document = {"deployment": spec.name, "source": spec.weights.source,
                    "hosts": [r.to_json() for r in reports], "identical": identical}
        if args.dry_run:
            document["dry_run"] = True
            for row, report in zip(document["hosts"], reports):
                row["to_transfer_bytes"] = report.planned_bytes
        ui.emit_json(document)
        return ExitStatus.OK
    from rich.table import Table

    from deployctl.ui import keep_numbers_whole

    table = Table(title=f"{spec.name}: weights {'(dry run)' if args.dry_run else ''}".strip())
    for column in ("host", "files", "bytes", "to transfer" if args.dry_run else "transferred", "seconds", "manifest"):
        table.add_column(column)
    for r in reports:
        moved = r.planned_bytes if args.dry_run else r.transferred_bytes
        table.add_row(r.host, str(r.files), str(r.bytes), str(moved), f"{r.seconds:.2f}", (r.manifest_digest or "-")[:19])
    keep_numbers_whole(table, "files", "bytes", "to transfer", "transferred", "seconds")
    ui.print(table)
    ui.print("[green]all hosts hold identical weights[/]" if identical else "[yellow]hosts differ[/]")
    return ExitStatus.OK
