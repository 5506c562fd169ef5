"""`validate`'s screen: its warnings and the summary of what the spec deploys."""

from __future__ import annotations


def render_warnings(ui, warnings: list) -> None:
    if not warnings:
        return  # nor rich's import: `validate -q` of a sound spec is the CLI's start-up figure
    from rich.markup import escape

    console = ui.console(stderr=True)
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning.render())}")
        if warning.hint:
            console.print(f"  [cyan]hint:[/] {escape(warning.hint)}")


def render_summary(ui, spec) -> None:
    """Instances per host (role, name, devices, ports, TP), the start order and NODE_PORTS."""
    if ui.quiet:
        return
    from rich import box
    from rich.table import Table

    from deployctl.servers import flavour_of
    from deployctl.ui import keep_numbers_whole

    table = Table(title=f"{spec.name}: {spec.mode}, {spec.platform}/{spec.server}", title_justify="left",
                  box=box.SIMPLE_HEAD)
    flavour = flavour_of(spec)
    more = flavour.summary_columns(spec)  # vllm-ascend's DP ranks
    columns = ("host", "role", "container", "devices", "ports", "TP") + more
    for column in columns:
        table.add_column(column, no_wrap=column in ("container", "ports"))
    for host in spec.hosts:
        for instance in (i for i in spec.instances if i.host == host.name):
            ports = [str(p) for _, p in instance.own_ports]
            devices = ",".join(map(str, instance.devices)) or "-"
            row = [host.name, instance.role, instance.name, devices, "/".join(ports) or "headless",
                   str(instance.tp) if instance.devices else "-"]
            cells = flavour.summary_cells(instance)
            row += [cells.get(column, "-") for column in more]
            table.add_row(*row)
    keep_numbers_whole(table, "devices", "ports", "TP")
    ui.print(table)
    ui.print("hosts: " + ", ".join(h.label for h in spec.used_hosts), markup=False)
    waves = [", ".join(i.name for i in wave) for wave in spec.start_order]
    ui.print("start order: " + "  ->  ".join(f"[{wave}]" for wave in waves), markup=False)
    if spec.profile is not None:
        ui.print(spec.profile.describe(), markup=False)
    if spec.scheduler is not None:  # the AscendCloud scheduler's workers find each other by them
        ui.print("NODE_PORTS: " + ",".join(map(str, spec.node_ports)), markup=False)
    from deployctl.servers.features import unasked

    for line in unasked(flavour):  # what it cannot do that no key asks for: said, never skipped in silence
        ui.print(f"not supported by {flavour.title}: {line}", markup=False)
    containers, hosts = len(spec.instances), len(spec.used_hosts)
    ui.print(f"spec is valid: {containers} container{'s' * (containers != 1)} on {hosts} host{'s' * (hosts != 1)}",
             markup=False)
