"""`deployctl ranktable gen|merge|validate`: files in, files out; the rules live in deployctl.ranktable."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from deployctl.errors import ExitStatus, RanktableError, UsageError


def gen(args, ui) -> int:
    """Vendor mode, on the host itself: device IPs from hccn_tool (or hccn.conf), files into --save-dir."""
    if args.spec:
        return _gen_for_spec(args, ui)
    from deployctl.ranktable.build import build_host_ranktables, check_request
    from deployctl.ranktable.gen_request import parse_server_list, refuse_invalid
    from deployctl.transport.local import LocalTransport

    prefill = parse_server_list("--prefill-server-list", args.prefill_server_list)
    decode = parse_server_list("--decode-server-list", args.decode_server_list)
    if not (prefill or decode or args.api_server):
        raise UsageError("nothing to generate: give --prefill-server-list, --decode-server-list or --api-server")
    transport = LocalTransport()
    host_ip = _this_host_ip(transport, args.host_ip)
    cards = _card_count(transport, args.cards)
    check_request(host_ip, prefill, decode, cards)  # validate's rules, before anything is gathered or written
    devices = sorted({d for instance in prefill + decode for d in instance})
    files = build_host_ranktables(host_ip, prefill, decode, args.api_server, _device_ips(transport, devices), cards)
    refuse_invalid(files.files(), cards)
    written = _write(transport, Path(args.save_dir or "."), files.files())
    _report_written(ui, written, f"ranktables for {host_ip}")
    return ExitStatus.OK


def _gen_for_spec(args, ui) -> int:
    """Every ranktable of a disaggregated spec, from its live hosts over SSH, already merged."""
    from deployctl.hosts import connect_options, connected
    from deployctl.prepare import ranktables_from_hosts
    from deployctl.spec.load import load_spec
    from deployctl.transport.local import LocalTransport

    spec = load_spec(args.spec)
    if spec.mode != "disaggregated":
        raise UsageError(f"{spec.name} is a mixed deployment: ranktables exist only for disaggregated specs")
    with connected(spec, options=connect_options(args, ui), hosts=spec.used_hosts) as transports:
        files = ranktables_from_hosts(spec, transports)
    directory = Path(args.save_dir) if args.save_dir else spec.state_dir / "ranktables"
    texts = {name: data.decode() for name, data in files.contents.items()}
    written = _write(LocalTransport(), directory, texts)
    _report_written(ui, written, f"ranktables for {spec.name} ({len(spec.used_hosts)} hosts)")
    return ExitStatus.OK


def merge(args, ui) -> int:
    """Per-host global files -> global_ranktable_merge.json; nothing is written when the merge is refused."""
    from deployctl.ranktable.model import MERGED_FILE_NAME, to_json
    from deployctl.ranktable.merge import merge_documents
    from deployctl.transport.local import LocalTransport

    paths = [*args.files, *args.global_ranktable_list]
    if not paths:
        raise UsageError("nothing to merge: give the per-host global ranktables (FILE... or --global-ranktable-list)")
    text = to_json(merge_documents([(path, _read_json(path)) for path in paths]))
    written = _write(LocalTransport(), Path(args.save_dir), {MERGED_FILE_NAME: text})
    _report_written(ui, written, f"merged {len(paths)} file{'s' if len(paths) != 1 else ''}")
    return ExitStatus.OK


def validate(args, ui) -> int:
    """Every file's kind and every broken rule; exit 2 (after printing) when any file is invalid."""
    from deployctl.ranktable.check import check_ranktable
    from deployctl.ranktable.validation import check_locals, file_report, validation_document

    reports, documents = [], {}
    for path in args.files:
        try:
            document = _read_json(path)
        except RanktableError as error:
            reports.append(file_report(path, None, [("", "readable", error.message.removeprefix(f"{path}: "))]))
            continue
        result = check_ranktable(document, complete=args.complete, cards=args.cards)
        documents[path] = (result, document)
        reports.append(file_report(path, result.kind, [(v.json_path, v.rule, v.message) for v in result.problems]))
    check_locals(reports, documents)
    if args.against_hosts:
        _check_against_hosts(args, reports, documents)
    document = validation_document(reports)
    ui.emit_json(document) if ui.json else _render_validation(ui, reports)
    return ExitStatus.OK if document["valid"] else ExitStatus.SPEC


def _check_against_hosts(args, reports: list[dict], documents: dict) -> None:
    """Each device_ip must be what `hccn_tool` reports for that NPU on the live host the file names."""
    from deployctl.hosts import connect_options, connected
    from deployctl.gather import gather_device_ips, on_hosts, server_ip
    from deployctl.ranktable.validation import check_against_live, devices_named
    from deployctl.spec.load import load_spec

    spec = load_spec(args.against_hosts)
    host_of_ip = {server_ip(h): h.name for h in spec.hosts}
    wanted = devices_named(documents, host_of_ip)
    hosts = [h for h in spec.hosts if h.name in wanted]
    live: dict = {}
    if hosts:  # none: no file names a host of the spec (`hosts=[]` would mean all of them)
        with connected(spec, options=connect_options(args), hosts=hosts) as transports:
            live = on_hosts(transports, lambda t: gather_device_ips(t, wanted[t.name]))
    check_against_live(reports, documents, host_of_ip, {h.name: h.label for h in spec.hosts}, live, spec.name)


def _render_validation(ui, reports: list[dict]) -> None:
    from deployctl.ui import escape

    width = max(len(r["file"]) for r in reports)
    for report in reports:
        status = "[green]valid[/]  " if report["valid"] else "[red]INVALID[/]"
        kind = report["kind"] or "-"
        count = len(report["errors"])
        suffix = "" if report["valid"] else f"  {count} error{'s' if count != 1 else ''}"
        ui.print(f"{status} {escape(report['file']).ljust(width)}  {kind}{suffix}")
        for error in report["errors"]:
            where = f"{error['json_path']}: " if error["json_path"] else ""
            ui.print(f"  {escape(where + error['message'])}  [dim]({escape(error['rule'])})[/]")
    bad = sum(not r["valid"] for r in reports)
    ui.print(f"{len(reports)} file{'s' if len(reports) != 1 else ''}: {len(reports) - bad} valid, {bad} invalid")


def _read_json(path: str) -> Any:
    """The file's JSON object; at most MAX_BYTES + 1 bytes are read, whatever the file (/dev/zero too)."""
    from deployctl.ranktable.decode import MAX_BYTES, decode_document

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RanktableError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode_document(data, path)


def _this_host_ip(transport, requested: Optional[str]) -> str:
    """--host-ip when it is bound here; else the address of the default route's interface."""
    from deployctl.gather import bound_host_ip

    if requested:
        _require_bound(requested)
        return requested
    return bound_host_ip(transport, "this host", hint="pass --host-ip with the address the other hosts reach "
                                                      "this one at")


def _card_count(transport, requested: Optional[int]) -> Optional[int]:
    """--cards, else `npu-smi info -l`'s count; None where npu-smi is not installed (ids then checked loosely)."""
    from deployctl.facts.npu_smi import parse_npu_smi_count
    from deployctl.core import Command

    if requested is not None:  # 1 or more: the parser's bound (cli_numbers)
        return requested
    result = transport.run(Command(("npu-smi", "info", "-l")), timeout=30)
    if result.exit_code == 127:
        return None
    if not result.ok:
        raise RanktableError(f"cannot count this host's cards: npu-smi info -l exited {result.exit_code}",
                             hint="pass --cards N")
    return parse_npu_smi_count(result.stdout).total_count


def _require_bound(address: str) -> None:
    """The kernel accepts a bind only to an address of this host: the check needs no `ip` tool."""
    import ipaddress
    import socket

    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise UsageError(f"--host-ip {address}: not an IPv4 address") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            raise RanktableError(f"--host-ip {address}: that address is not bound on this host",
                                 hint="give an address of this host (see `ip -4 addr`)") from None


def _device_ips(transport, devices: list[int]) -> dict[int, str]:
    """Each NPU's device IP: the tool first (PATH, then the driver's folder), hccn.conf when it has none."""
    from deployctl.gather import gather_device_ips

    return gather_device_ips(transport, tuple(devices), where="")


def _write(transport, save_dir: Path, files: dict[str, str]) -> list[str]:
    """Write each file atomically (temp file + rename); the paths written, in order."""
    written = []
    for name, text in files.items():
        path = str(save_dir / name)
        try:
            transport.put(path, text.encode("utf-8"), mode=0o644)
        except OSError as exc:
            raise RanktableError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    return written


def _report_written(ui, written: list[str], what: str) -> None:
    if ui.json:
        ui.emit_json({"written": written})
        return
    from deployctl.ui import escape

    ui.print(f"{escape(what)}: wrote {len(written)} file{'s' if len(written) != 1 else ''}")
    for path in written:
        ui.print(f"  {escape(path)}")
