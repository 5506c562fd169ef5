"""`deployctl logs`: container logs, each line prefixed by its instance; -f follows."""

from __future__ import annotations

import sys
import time

from deployctl.errors import ExitStatus, UsageError


def _lines(transport, name: str, since: str | None, tail: int) -> list[tuple[str, str]]:
    """(timestamp, text) pairs from `docker logs --timestamps` (stdout and stderr together)."""
    from deployctl.plan.model import Command

    argv = ["docker", "logs", "--timestamps"]
    argv += ["--since", since] if since else ["--tail", str(tail)]
    result = transport.run(Command((*argv, name)), timeout=60)
    pairs = []
    for line in (result.stdout + result.stderr).splitlines():
        stamp, _, text = line.partition(" ")
        pairs.append((stamp, text))
    return sorted(pairs)


def run(args, ui) -> int:
    from deployctl import deploy
    from deployctl.spec.load import load_spec

    spec = load_spec(args.spec)
    instances = [i for i in spec.instances if args.instance in (None, i.name)]
    if not instances:
        names = ", ".join(i.name for i in spec.instances)
        raise UsageError(f"no instance {args.instance!r} in {spec.name} (instances: {names})")
    width = max(len(i.name) for i in instances)
    with deploy.connected(spec, accept_new_host_keys=args.accept_new_host_keys,
                          hosts=[spec.host(n) for n in dict.fromkeys(i.host for i in instances)]) as transports:
        last: dict[str, str] = {}
        since = None
        while True:
            for instance in instances:
                for stamp, text in _lines(transports[instance.host], instance.name, since and last.get(instance.name), args.tail):
                    if since and stamp <= last.get(instance.name, ""):
                        continue
                    last[instance.name] = stamp
                    sys.stdout.write(f"{instance.name:<{width}} | {text}\n")
            sys.stdout.flush()
            if not args.follow:
                return ExitStatus.OK
            since = "follow"
            time.sleep(1.0)
