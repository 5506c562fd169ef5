"""`deployctl logs`: container logs, each line prefixed by its instance; -f follows; -o json is one document.
A container that is not there, or a Docker daemon that does not answer, is an error (exit 1), never a log line.
The spec's secret values in a line are `<redacted>` (deployctl/redaction.py)."""

from __future__ import annotations

import sys
import time

from deployctl.errors import ExitStatus, HostError, UsageError

DOCKER_HINT = "start it (systemctl start docker) and check `docker ps` on the host"


def read_logs(transport, name: str, since: str | None, tail: int) -> list[tuple[str, str]]:
    """(timestamp, text) pairs of one container, oldest first; a HostError when docker cannot give them."""
    from deployctl.facts.docker_logs import logs_argv, parse_docker_logs
    from deployctl.core import Command

    result = transport.run(Command(logs_argv(name, since, tail)), timeout=60)
    answer = parse_docker_logs(result.exit_code, result.stdout, result.stderr)
    if answer.failure is None:
        # The log as the container wrote it, but for the spec's own secret values (and `NAME=value` pairs whose
        # name says secret): vLLM logs its arguments at start, an --api-key among them, and the contract says a
        # secret is never printed. One redaction, the one every quote of a host's text goes through.
        from deployctl.redaction import redact

        return [(stamp, redact(text)) for stamp, text in answer.lines]
    address = transport.address
    if answer.failure == "missing":
        raise HostError(transport.name, f"instance {name} is not deployed (no container {name})", address=address,
                        hint="`deployctl up SPEC` deploys it; `deployctl status SPEC` shows what runs")
    if answer.failure == "daemon":
        raise HostError(transport.name, f"cannot read the logs of {name}: the Docker daemon is not reachable",
                        address=address, stderr_tail=answer.detail, hint=DOCKER_HINT)
    if answer.failure == "no-docker":
        raise HostError(transport.name, f"cannot read the logs of {name}: docker is not installed", address=address,
                        stderr_tail=answer.detail)
    raise HostError(transport.name, f"docker logs {name} failed", address=address, exit_code=result.exit_code,
                    stderr_tail=answer.detail)


def run(args, ui) -> int:
    from deployctl.hosts import connect_options, connected
    from deployctl.spec.load import load_spec

    spec = load_spec(args.spec, unresolved_env="allow")  # env values are never sent here
    instances = [i for i in spec.instances if args.instance in (None, i.name)]
    if not instances:
        names = ", ".join(i.name for i in spec.instances)
        raise UsageError(f"no instance {args.instance!r} in {spec.name} (instances: {names})")
    if args.follow and ui.json:
        raise UsageError("--follow streams lines as they come; --output json prints one document (drop one of them)")
    hosts = [spec.host(n) for n in dict.fromkeys(i.host for i in instances)]
    with connected(spec, options=connect_options(args, ui), hosts=hosts) as transports:
        if ui.json:
            return _json(ui, spec.name, instances, transports, args.tail)
        return _print(instances, transports, args.tail, args.follow)


def _json(ui, deployment: str, instances, transports, tail: int) -> int:
    """One document: every instance's lines, or each failure and the first as `error` (exit 1)."""
    from deployctl.ui import render_error

    entries, errors = [], []
    for instance in instances:
        entry = {"name": instance.name, "host": instance.host}
        try:
            entry["lines"] = [text for _, text in read_logs(transports[instance.host], instance.name, None, tail)]
        except HostError as error:
            entry["error"] = error.message
            errors.append(error)
        entries.append(entry)
    document = {"deployment": deployment, "instances": entries}
    if not errors:
        ui.emit_json(document)
        return ExitStatus.OK
    first = _combined(errors)
    ui.emit_json({**document, "error": {"message": first.message, "host": first.host, "hint": first.hint}})
    render_error(ui, first)
    return int(first.exit_status)


def _print(instances, transports, tail: int, follow: bool) -> int:
    """Lines as `<instance> | <text>`; what could be read is printed before the error about the rest."""
    width = max(len(i.name) for i in instances)
    last: dict[str, str] = {}
    since = None
    while True:
        errors = []
        for instance in instances:
            try:
                pairs = read_logs(transports[instance.host], instance.name, since and last.get(instance.name), tail)
            except HostError as error:
                errors.append(error)
                continue
            for stamp, text in pairs:
                if since and stamp <= last.get(instance.name, ""):
                    continue
                last[instance.name] = stamp
                sys.stdout.write(f"{instance.name:<{width}} | {text}\n")
        sys.stdout.flush()
        if errors:
            raise _combined(errors)
        if not follow:
            return ExitStatus.OK
        since = "follow"
        time.sleep(1.0)


def _combined(errors: list[HostError]) -> HostError:
    first = errors[0]
    if len(errors) > 1:
        first.message += " (also: " + "; ".join(e.message for e in errors[1:]) + ")"
    return first
