"""The one gather: every probe a command needs on a host, run as one batch (one round trip per host), all
hosts in parallel, parsed by the pure assembler into one HostFacts per host."""

from __future__ import annotations

import ipaddress
import socket
from typing import Mapping, Optional, Sequence

from deployctl.batch import run_batch
from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.facts.assemble import ProbeOutput, host_facts_from
from deployctl.facts.model import HostFacts
from deployctl.facts.hccn_tool import device_ip_probes
from deployctl.facts.probe import Probe
from deployctl.fanout import on_hosts
from deployctl.spec.model import Host, Spec
from deployctl.transport import Transport

Results = list[tuple[Probe, ProbeOutput]]


def run_probes(transport: Transport, probes: Sequence[Probe], timeout: float = 120) -> Results:
    """One batch on the host: every probe's stdout, stderr and exit code, in order; bounded by `timeout` plus
    what the probes' own reads may wait (a slow answer within their bounds is not an unreachable host)."""
    bound = timeout + sum(p.waits_s for p in probes)
    results = run_batch(transport, [Command(p.argv) for p in probes], timeout=bound)
    return [(p, ProbeOutput(r.exit_code, r.stdout, r.stderr)) for p, r in zip(probes, results)]


def gather_state(spec: Spec, transports: Mapping[str, Transport], *, skip: frozenset[str] = frozenset(),
                 stages: frozenset[str] = frozenset({"image", "weights", "ranktables", "containers"}),
                 strict: bool = True, check: bool = True, hang_after: Optional[float] = None) -> dict[str, HostFacts]:
    """What `plan_up` reads, from every host in one round trip each. With `check`, a host whose Docker daemon
    (or, `strict`, python3 for the weights) cannot answer is a HostError naming it (see check_answers)."""
    from deployctl.plan.probes import state_probes

    def one(transport: Transport) -> HostFacts:
        options = {} if hang_after is None else {"hang_after": hang_after}
        probes = state_probes(spec, transport.name, skip=skip, stages=stages, **options)
        return host_facts_from(run_probes(transport, probes, timeout=120), disk_path=None)

    facts = on_hosts(transports, one)
    if check:
        check_answers(spec, transports, facts, skip=skip, stages=stages, strict=strict)
    return facts


def check_answers(spec: Spec, transports: Mapping[str, Transport], facts: Mapping[str, HostFacts], *,
                  skip: frozenset[str], stages: frozenset[str], strict: bool = True) -> None:
    """A HostError for the first host that could not say what the plan must know."""
    from deployctl.plan.probes import state_probes

    for name, transport in transports.items():
        keys = {p.key for p in state_probes(spec, name, skip=skip, stages=stages)}
        _require_answers(transport, keys, facts[name], strict)


def _require_answers(transport: Transport, keys: set[str], facts: HostFacts, strict: bool) -> None:
    if "deployed" in keys and facts.deployed is None:
        raise HostError(transport.name, "the Docker daemon is not reachable", address=transport.address,
                        stderr_tail=facts.probe_error("deployed") or "",
                        hint="start it (systemctl start docker) and check `docker ps` on the host")
    if "image" in keys and facts.image is None and strict:
        raise HostError(transport.name, "cannot read the host's images", address=transport.address,
                        stderr_tail=facts.probe_error("image") or "")
    if "weights" in keys and facts.weights is None and strict:
        if "python3" in facts.missing_tools:
            raise HostError(transport.name, "python3 is not installed; weights sync runs its fetcher with python3",
                            address=transport.address, hint="install python3 (>= 3.7) on the host")
        raise HostError(transport.name, "cannot read the state of the weights directory",
                        address=transport.address, stderr_tail=facts.probe_error("weights") or "")


def gather_device_ips(transport: Transport, devices: tuple[int, ...], *, where: str | None = None
                      ) -> dict[int, str]:
    """Each NPU's RoCE address: `hccn_tool -i N -ip -g`, else /etc/hccn.conf `address_N`; else a RanktableError
    naming `where` (default: the host)."""
    from deployctl.plan.probes import device_ip_of

    facts = host_facts_from(run_probes(transport, device_ip_probes(devices), timeout=60))
    return {d: device_ip_of(facts, transport.name if where is None else where, d) for d in devices}


def server_ip(host: Host, transport: Transport | None = None) -> str:
    """The address ranktables give the host: the spec's IPv4 address, a name resolved forward (never reverse
    DNS), or for `local` an address bound on this machine. Any failure is a HostError naming host and address."""
    if host.is_local:
        from deployctl.transport.local import LocalTransport

        return bound_host_ip(transport or LocalTransport(host.name), host.name,
                             hint="write the host's address in the spec instead of `local`")
    try:
        return str(ipaddress.IPv4Address(host.address))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host.address, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError; an over-long label a UnicodeError
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise HostError(host.name, f"cannot resolve {host.address!r} to an IPv4 address: {why}",
                        address=host.address, hint="write the host's IPv4 address in the spec") from None
    return found[0][4][0]


def bound_host_ip(transport: Transport, name: str, *, hint: str) -> str:
    """An IPv4 address bound on the transport's host: its default route's interface's, else the first global one."""
    from deployctl.errors import RanktableError
    from deployctl.ranktable.host_address import (
        DEFAULT_ROUTE_ARGV, IP_ADDR_ARGV, choose_host_ip, parse_default_route, parse_ip_addr,
    )

    addresses = transport.run(Command(IP_ADDR_ARGV), timeout=10)
    if not addresses.ok:
        detail = addresses.stderr.strip().splitlines()[-1] if addresses.stderr.strip() else ""
        raise HostError(name, f"cannot tell this host's address: `{' '.join(IP_ADDR_ARGV)}` exited "
                              f"{addresses.exit_code}{': ' + detail if detail else ''}", hint=hint)
    route = transport.run(Command(DEFAULT_ROUTE_ARGV), timeout=10)
    try:
        return choose_host_ip(parse_ip_addr(addresses.stdout), parse_default_route(route.stdout) if route.ok else None)
    except RanktableError as error:
        raise HostError(name, error.message, hint=hint) from None

