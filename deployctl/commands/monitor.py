"""`deployctl monitor`: write the deployment's monitoring pack (Prometheus file_sd targets, prometheus.yml, alert
rules, blackbox_exporter's module, Grafana provisioning and dashboard) to a directory; `up` and `down` rewrite it
when the spec has `monitor:`. `--scan-logs DIR` also writes the known-error counts of every container's log as a
node_exporter textfile."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, Optional

from deployctl.errors import ExitStatus


def run(args, ui) -> int:
    from deployctl.spec.load import load_spec

    spec = load_spec(args.spec, unresolved_env="allow")  # nothing of env is sent or written
    out = Path(args.out) if args.out else spec.monitor_dir
    if args.offline and not args.scan_logs:
        return _report(spec, ui, write_pack(spec, out, None), out)
    from deployctl.hosts import connect_options, connected

    with connected(spec, hosts=spec.used_hosts, options=connect_options(args, ui)) as transports:
        exporters = None if args.offline else listening_ports(transports)
        written = write_pack(spec, out, exporters)
        if args.scan_logs:
            path = scan_logs(spec, transports, Path(args.scan_logs), args.lines)
            ui.info(f"known-error counts of {spec.name}'s container logs: {path}")
    return _report(spec, ui, written, out)


def listening_ports(transports: Mapping) -> dict[str, frozenset[int]]:
    """Each host's listening TCP ports (doctor's `listening` fact), one round trip per host, all at once."""
    from deployctl.facts.assemble import host_facts_from
    from deployctl.facts.listening import listening_probe
    from deployctl.fanout import on_hosts
    from deployctl.gather import run_probes

    def one(transport) -> Optional[frozenset[int]]:
        # an unreadable /proc (no `listening` fact): say nothing about its exporters (they stay targets)
        listening = host_facts_from(run_probes(transport, [listening_probe()], timeout=30)).listening
        return listening.ports if listening is not None else None

    found = on_hosts(transports, one)
    return {name: ports for name, ports in found.items() if ports is not None}


def write_pack(spec, out: Path, listening: Optional[dict], deployed: bool = True):
    """Render the pack and write each file that changed (atomically: a reader never sees half a file)."""
    from deployctl.monitor import Exporters, render_pack

    pack = render_pack(spec, Exporters(listening) if listening is not None else None, deployed=deployed)
    for relative, text in pack.files.items():
        _write(out / relative, text)
    return pack


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return  # unchanged: Prometheus and Grafana see no reload
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def regenerate(spec, transports, ui, deployed: bool = True) -> None:
    """After `up` (or `down`, `deployed=False`) of a spec with `monitor:`: the pack matches what runs now."""
    if spec.monitor is None:
        return
    used = {h.name for h in spec.used_hosts}
    pack = write_pack(spec, spec.monitor_dir, listening_ports({n: t for n, t in transports.items() if n in used})
                      if deployed else None, deployed=deployed)
    ui.info(f"monitoring pack: {spec.monitor_dir} ({_count(pack)})")
    _notes(ui, pack)


def _notes(ui, pack) -> None:
    from deployctl.ui import escape

    for note in pack.notes:
        ui.info(f"[yellow]note:[/] {escape(note)}")


def scan_logs(spec, transports: Mapping, directory: Path, lines: int) -> Path:
    """Match the last `lines` log lines of each of the deployment's containers against the known-error signatures
    and write `deployctl-<name>.prom` for node_exporter's textfile collector."""
    from deployctl.batch import run_batch
    from deployctl.core import Command
    from deployctl.errors import HostError
    from deployctl.facts.docker_logs import logs_argv, parse_docker_logs
    from deployctl.fanout import on_hosts
    from deployctl.monitor.known_errors import ContainerLog, render_textfile

    def one(transport):
        """Every container of the host in one round trip (one batch), each with its own exit code."""
        names = [i.name for i in spec.instances if i.host == transport.name]
        try:
            results = run_batch(transport, [Command(logs_argv(name, tail=lines)) for name in names],
                                timeout=60 * max(1, len(names)))
        except HostError:
            return []  # the host does not answer: nothing to count there
        found = []
        for name, result in zip(names, results):
            answer = parse_docker_logs(result.exit_code, result.stdout, result.stderr)
            if answer.failure is None:  # else not deployed there (or no docker): nothing to count
                found.append(ContainerLog(transport.name, name, "\n".join(text for _, text in answer.lines)))
        return found

    logs = [log for found in on_hosts(transports, one).values() for log in found]
    path = directory / f"deployctl-{spec.name}.prom"
    _write(path, render_textfile(spec.name, logs, time.time()))
    return path


def _count(pack) -> str:
    t = pack.targets
    return (f"{len(t.servers)} API servers, {len(t.fronts)} front, {len(t.npu)} NPU exporters, "
            f"{len(t.node)} node exporters")


def _report(spec, ui, pack, out: Path) -> int:
    if ui.json:
        ui.emit_json({"deployment": spec.name, "out": str(out), "files": sorted(pack.files),
                      "targets": {"servers": [t.to_json() for t in pack.targets.servers],
                                  "fronts": [t.to_json() for t in pack.targets.fronts],
                                  "npu_exporters": [t.to_json() for t in pack.targets.npu],
                                  "node_exporters": [t.to_json() for t in pack.targets.node]},
                      "notes": list(pack.notes)})
        return ExitStatus.OK
    _notes(ui, pack)
    ui.print(f"{spec.name}: monitoring pack written to {out} ({_count(pack)}); "
             f"prometheus --config.file={out / 'prometheus.yml'}")
    return ExitStatus.OK
