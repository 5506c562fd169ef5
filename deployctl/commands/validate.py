"""`deployctl validate SPEC`: load + every rule, no network; print the derived layout or every problem."""

from __future__ import annotations

from deployctl.errors import ExitStatus, Problem, SpecError


def run(args, ui) -> int:
    from deployctl.spec.load import check_spec_file

    spec, errors, warnings = check_spec_file(args.spec)
    if spec is not None:
        warnings = sorted(warnings + local_file_warnings(spec, args.spec), key=lambda p: (p.line, p.column))
    if ui.json:
        ui.emit_json(validation_document(spec, errors, warnings))
        return int(ExitStatus.SPEC if errors else ExitStatus.OK)
    _render_warnings(ui, warnings)
    if errors:
        raise SpecError(errors)  # its warnings were just shown
    _render_summary(ui, spec)
    return int(ExitStatus.OK)


def validation_document(spec, errors: list[Problem], warnings: list[Problem]) -> dict:
    """The contract's `validate --output json` document."""
    return {
        "valid": not errors,
        "errors": [_located(p) for p in errors],
        "warnings": [_located(p) for p in warnings],
        "summary": {"instances": [] if spec is None else [
            {"name": i.name, "role": i.role, "host": i.host, "devices": list(i.devices), "port": i.port,
             "tp": i.tp if i.devices else None}  # the scheduler holds no devices
            for i in spec.instances
        ]},
    }


def local_file_warnings(spec, spec_path) -> list[Problem]:
    """A local image.build.packages that is missing on this (the control) machine: `image build`/`up` will refuse.

    A warning, not an error: the package is often fetched after the spec is written."""
    from deployctl.image.fetch import missing_local_package

    missing = missing_local_package(spec)
    if missing is None:
        return []
    path = ("image", "build", "packages")
    line, column = _locate(spec_path, path)
    return [Problem(path, f"{missing}: no such file on this machine (`image build` and `up` need it)",
                    hint="put the AscendCloud-<ver>-<timestamp>.zip there, or point packages at it "
                         "(a relative path is relative to the spec file)",
                    file=str(spec_path), line=line, column=column, severity="warning")]


def _locate(spec_path, path: tuple) -> tuple[int, int]:
    from pathlib import Path

    from deployctl.spec.locate import SyntaxProblem, compose_document

    try:
        return compose_document(Path(spec_path).read_text(encoding="utf-8"), {}, str(spec_path)).locate(path)
    except (OSError, UnicodeDecodeError, SyntaxProblem):  # loaded a moment ago; a position is a nicety only
        return 0, 0


def _located(problem: Problem) -> dict:
    return {key: problem.to_json()[key] for key in ("file", "line", "column", "path", "message")} | (
        {"hint": problem.hint} if problem.hint else {})


def _render_warnings(ui, warnings: list[Problem]) -> None:
    from rich.markup import escape

    console = ui.console(stderr=True)
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning.render())}")
        if warning.hint:
            console.print(f"  [cyan]hint:[/] {escape(warning.hint)}")


def _render_summary(ui, spec) -> None:
    """Instances per host (role, name, devices, ports, TP), the start order and NODE_PORTS."""
    from rich import box
    from rich.table import Table

    from deployctl.ui import keep_numbers_whole

    if ui.quiet:
        return
    table = Table(title=f"{spec.name}: {spec.mode}, {spec.platform}/{spec.server}", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for column in ("host", "role", "container", "devices", "ports", "TP"):
        table.add_column(column, no_wrap=column in ("container", "ports"))
    for host in spec.hosts:
        for instance in (i for i in spec.instances if i.host == host.name):
            ports = [str(instance.port)] + [str(p) for p in (instance.grpc_port, instance.metrics_port) if p]
            devices = ",".join(map(str, instance.devices)) or "-"
            table.add_row(host.name, instance.role, instance.name, devices, "/".join(ports),
                          str(instance.tp) if instance.devices else "-")
    keep_numbers_whole(table, "devices", "ports", "TP")
    ui.print(table)
    ui.print("hosts: " + ", ".join(h.label for h in spec.used_hosts), markup=False)
    waves = [", ".join(i.name for i in wave) for wave in spec.start_order]
    ui.print("start order: " + "  ->  ".join(f"[{wave}]" for wave in waves), markup=False)
    if spec.mode == "disaggregated":
        ui.print("NODE_PORTS: " + ",".join(map(str, spec.node_ports)), markup=False)
    containers, hosts = len(spec.instances), len(spec.used_hosts)
    ui.print(f"spec is valid: {containers} container{'s' * (containers != 1)} on {hosts} host{'s' * (hosts != 1)}",
             markup=False)
