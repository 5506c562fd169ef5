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
    scans = Path(args.scan_logs) if args.scan_logs else None
    # every place written is checked before any host is asked or any file written
    check_output(out, _pack_files(spec))
    if scans is not None:
        check_output(scans, (textfile_name(spec),), what="--scan-logs")
    if args.offline and scans is None:
        written, changed = write_pack(spec, out, None)
        return _report(spec, ui, written, out, changed)
    from deployctl.hosts import connect_options, connected

    with connected(spec, hosts=spec.used_hosts, options=connect_options(args, ui)) as transports:
        exporters = None if args.offline else listening_ports(transports)
        written, changed = write_pack(spec, out, exporters)
        if scans is not None:
            path = scan_logs(spec, transports, scans, args.lines)
            ui.info(f"known-error counts of {spec.name}'s container logs: {path}")
            ui.info(_where_scans_go(written, path))
    return _report(spec, ui, written, out, changed)


def textfile_name(spec) -> str:
    return f"deployctl-{spec.name}.prom"


def _where_scans_go(pack, path: Path) -> str:
    from deployctl.ui import escape

    hosts = ", ".join(dict(t.labels)["host"] for t in pack.targets.node)
    scraped = (f"this pack scrapes node_exporter on {hosts}" if hosts
               else "this pack scrapes no node_exporter (none listens on monitor.node_exporter_port)")
    return escape(f"node_exporter reads its --collector.textfile.directory on its own machine: {path.parent} "
                  f"must be that directory of a node_exporter Prometheus scrapes ({scraped}; run --scan-logs "
                  "there, or copy the file there) — else DeployctlHcclErrors never sees it")


def _pack_files(spec) -> tuple[str, ...]:
    from deployctl.monitor import render_pack

    return tuple(render_pack(spec).files)


def check_output(out: Path, relatives, what: str = "--out") -> None:
    """Refuse an output directory before anything is written: a file where it or a directory inside it must be,
    a directory where a file goes, or a place this user cannot write (the nearest existing directory)."""
    from deployctl.errors import UsageError

    needed = {out} | {(out / r).parent for r in relatives}
    for directory in sorted(needed):
        for place in [directory, *directory.parents]:
            if place.exists() or place.is_symlink():
                if not place.is_dir():
                    raise UsageError(f"{what} {out}: {place} is a file, not a directory; nothing was written",
                                     hint="choose another directory, or move that file away")
                if not os.access(place, os.W_OK | os.X_OK):
                    raise UsageError(f"{what} {out}: cannot write in {place} (permission denied); nothing was "
                                     "written", hint="choose a directory this user can write")
                break
    for relative in relatives:
        if (out / relative).is_dir():
            raise UsageError(f"{what} {out}: {out / relative} is a directory where a file goes; nothing was "
                             "written", hint="remove that directory, or choose another --out")


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


def write_pack(spec, out: Path, listening: Optional[dict], deployed: bool = True,
               leave_out: frozenset = frozenset()):
    """Render the pack and write each file that changed: (pack, the relative paths changed)."""
    from deployctl.monitor import Exporters, render_pack

    pack = render_pack(spec, Exporters(listening) if listening is not None else None, deployed=deployed,
                       leave_out=leave_out)
    check_output(out, tuple(pack.files))
    return pack, write_files(out, pack.files)


def write_files(out: Path, files: Mapping[str, str]) -> frozenset:
    """Write each file whose bytes differ (unchanged: Prometheus and Grafana see nothing), all or none: every
    new text goes to a temporary beside its file first, and only then are they renamed into place (a reader
    never sees half a file); a failure removes the temporaries and the directories made."""
    from deployctl.errors import DeployctlError

    changed = {relative: text for relative, text in files.items() if not _holds(out / relative, text)}
    made: list[Path] = []
    staged: list[tuple[Path, Path]] = []
    try:
        for relative, text in changed.items():
            path = out / relative
            missing = [d for d in [path.parent, *path.parent.parents] if not d.exists()]
            for directory in reversed(missing):
                directory.mkdir()
                made.append(directory)
            temporary = path.with_name(f".{path.name}.{os.getpid()}")
            staged.append((temporary, path))
            temporary.write_text(text, encoding="utf-8")
        for temporary, path in staged:
            os.replace(temporary, path)
    except OSError as error:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        for directory in reversed(made):
            try:
                directory.rmdir()
            except OSError:
                pass
        raise DeployctlError(f"cannot write {error.filename or out}: {error.strerror or error}; nothing was "
                             "written", hint="choose a directory this user can write") from None
    return frozenset(changed)


def _holds(path: Path, text: str) -> bool:
    try:
        return path.is_file() and path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def regenerate(spec, transports, ui, deployed: bool = True, leave_out: frozenset = frozenset(),
               quiet: bool = False) -> None:
    """For a spec with `monitor:`, around `up` and `down`: the target lists hold what serves (`deployed=False`:
    nothing; `leave_out`: the containers about to be restarted), and Prometheus is reloaded (or the user told to)
    when the rule file changed. A pack that cannot be written is said, and the deployment goes on."""
    from deployctl.errors import DeployctlError
    from deployctl.ui import escape

    if spec.monitor is None:
        return
    used = {h.name for h in spec.used_hosts}
    try:
        pack, changed = write_pack(spec, spec.monitor_dir, listening_ports(
            {n: t for n, t in transports.items() if n in used}) if deployed else None, deployed=deployed,
            leave_out=leave_out)
    except DeployctlError as error:
        ui.info(f"[yellow]warning:[/] monitoring pack not written: {escape(error.message)}")
        return
    if not quiet:
        ui.info(f"monitoring pack: {escape(str(spec.monitor_dir))} ({_count(pack)})")
        _notes(ui, pack)
    after_rules_change(spec, ui, changed)


def after_rules_change(spec, ui, changed) -> None:
    """Prometheus reads rule files only at start and on reload (docs: configuration.md, "reload at runtime ... a
    SIGHUP or an HTTP POST to /-/reload when --web.enable-lifecycle is set; this also reloads rule files");
    target lists it re-reads by itself (file_sd). So a changed rule file is reloaded where the spec names
    Prometheus' URL, else said."""
    from deployctl.monitor.pack import RULES
    from deployctl.ui import escape

    if RULES not in changed:
        return
    url = spec.monitor.prometheus_url if spec.monitor else None
    if url:
        reloaded = reload_prometheus(url)
        if reloaded is None:
            ui.info(f"Prometheus at {escape(url)} reloaded the changed alert rules")
            return
        ui.info(f"[yellow]warning:[/] Prometheus at {escape(url)} did not reload: {escape(reloaded)}")
    ui.info("[yellow]note:[/] the alert rules changed: Prometheus reads rule files only at start and on reload — "
            "reload it (POST http://PROMETHEUS:9090/-/reload with --web.enable-lifecycle, or SIGHUP), or set "
            "monitor.prometheus_url and `up`/`down` will")


def reload_prometheus(url: str, timeout: float = 10.0) -> Optional[str]:
    """POST URL/-/reload; None when Prometheus answered 200 (it has reloaded by then), else why not."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url.rstrip("/") + "/-/reload", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the user's own Prometheus
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        said = error.read(300).decode("utf-8", "replace").strip()
        return f"HTTP {error.code} {said}".strip()
    except (OSError, ValueError) as error:
        return str(getattr(error, "reason", None) or error)


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
    path = directory / textfile_name(spec)
    write_files(directory, {path.name: render_textfile(spec.name, logs, time.time())})
    return path


def _count(pack) -> str:
    t = pack.targets
    return (f"{len(t.servers)} API servers, {len(t.fronts)} front, {len(t.npu)} NPU exporters, "
            f"{len(t.node)} node exporters")


def _report(spec, ui, pack, out: Path, changed) -> int:
    after_rules_change(spec, ui, changed)
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
