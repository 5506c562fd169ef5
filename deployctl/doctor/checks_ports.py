"""Doctor's port checks (pure): every port the spec's containers will listen on is free on its host (or held by
this deployment's own running containers), and none sits in the kernel's ephemeral range unreserved, where an
outgoing connection can take it first."""

from __future__ import annotations

from typing import Optional

from deployctl.facts.listening import port_list
from deployctl.facts.model import HostFacts
from deployctl.plan.findings import FAIL, PASS, WARN, Finding, owned_by, unknown
from deployctl.spec.model import Spec


def listen_ports(spec: Spec, host: str) -> tuple[tuple[int, str], ...]:
    """(port, what) for every port the deployment's containers bind at `host`: API, triton, kv, rpc, front ports (the
    spec's one port set, spec/port_set.py, less the exporters the host runs itself)."""
    from deployctl.spec.port_set import spec_ports
    from deployctl.spec.port_uses import DEPLOYMENT

    return tuple((use.port, use.name) for use in spec_ports(spec) if use.host == host and use.owner == DEPLOYMENT)


def check_ports(facts: HostFacts, wanted: tuple[tuple[int, str], ...], deployment: Optional[str]) -> tuple[Finding, ...]:
    """`ports` (free, or ours) and `ephemeral_ports` (outside ip_local_port_range); nothing when none are wanted."""
    if not wanted:
        return ()
    if facts.listening is None:
        return (unknown("ports", facts, "listening", "cat", "free"),)
    taken = [(port, what) for port, what in wanted if port in facts.listening.ports]
    ours = any(owned_by(c, deployment) and c.running for c in facts.containers or ())
    low, high = facts.listening.ephemeral
    if not taken:
        ports = Finding("ports", PASS, f"{len(wanted)} free", "free", None)
    elif ours:
        ports = Finding("ports", PASS, f"{len(taken)} of {len(wanted)} held by {deployment}'s running containers",
                        "free, or held by this deployment", None)
    else:
        ports = Finding("ports", FAIL, f"in use: {said_ports(taken)}", "free",
                        f"stop what listens there (ss -ltnp 'sport = :{taken[0][0]}') or choose other ports in the spec")
    inside = [(port, what) for port, what in wanted if facts.listening.exposed(port)]
    kept = sum(1 for port, _ in wanted if port in facts.listening.reserved and facts.listening.ephemeral_holds(port))
    if not inside:
        said = f"none in {low}-{high}" + (f" but {kept} reserved from it" if kept else "")
        ephemeral = Finding("ephemeral_ports", PASS, said, f"outside {low}-{high}, or reserved", None)
    else:
        reserved = port_list(facts.listening.reserved | {p for p, _ in inside})
        ephemeral = Finding("ephemeral_ports", WARN, f"in the ephemeral range {low}-{high}: {said_ports(inside)}",
                            f"outside {low}-{high}, or reserved", f"`up` reserves them (until a reboot); choose "
                            f"ports below {low}, or reserve them for good: "
                            f"sysctl -w net.ipv4.ip_local_reserved_ports={reserved}")
    return ports, ephemeral


def said_ports(ports: list[tuple[int, str]]) -> str:
    """`30000-30015 (prefill group 0 kv ports 30000-30015), 8000 (the proxy)`: runs of one use shortened."""
    runs: list[list] = []
    for port, what in ports:
        if runs and runs[-1][2] == what and port == runs[-1][1] + 1:
            runs[-1][1] = port
        else:
            runs.append([port, port, what])
    return ", ".join(f"{a}-{b} ({what})" if b > a else f"{a} ({what})" for a, b, what in runs)


