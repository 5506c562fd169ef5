"""The ports a deployment listens on that lie in a host's ephemeral range, reserved before its servers start
(pure). The kernel gives every outgoing connection a local port from net.ipv4.ip_local_port_range (32768-60999 by
default); a server that binds a port some connection holds fails with "Address already in use" — a P/D rank's
kv port (36000 up on 16-NPU hosts, above Mooncake's own range, vllm-ascend #6455) meets the ephemeral port of
another rank's connection to its DP master now and then. Ports in ip_local_reserved_ports are never handed out
that way (Documentation/networking/ip-sysctl.rst), so `up` adds the exposed ones to the host's list, keeping
what the list held. Until a reboot: `doctor`'s ephemeral_ports finding gives the line that keeps it."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from deployctl.core import Command
from deployctl.facts.listening import RESERVED, Listening, port_list
from deployctl.facts.model import HostFacts
from deployctl.doctor.checks_ports import listen_ports, said_ports
from deployctl.plan.model import Stage, Step
from deployctl.spec.model import Spec

# $1: the ports to add, in the kernel's list format. The host's list is read and written in one command, so a
# reservation made since the facts were gathered is kept.
RESERVE_SCRIPT = f'cur=$(cat {RESERVED}) && printf "%s\\n" "${{cur:+$cur,}}$1" > {RESERVED}'


def plan_reserved_ports(spec: Spec, facts: Mapping[str, HostFacts]) -> Optional[Stage]:
    """The `ports` stage: on each host where the spec listens on ports in its ephemeral range that are not
    reserved, one command that reserves them; None when no host needs it (or none said its ranges)."""
    steps = [reserve_step(host.name, listen_ports(spec, host.name), facts[host.name].listening)
             for host in spec.used_hosts if host.name in facts]
    kept = tuple(step for step in steps if step is not None)
    return Stage("ports", kept) if kept else None


def reserve_step(host: str, ports: Iterable[tuple[int, str]], listening: Optional[Listening],
                 wave: int = 0) -> Optional[Step]:
    """One host's reservation of those of `ports` ((port, what)) its ephemeral range holds unreserved; None when
    none does (or the host did not say its range)."""
    if listening is None:
        return None
    exposed = sorted({(port, what) for port, what in ports if listening.exposed(port)})
    if not exposed:
        return None
    low, high = listening.ephemeral
    wanted = port_list(p for p, _ in exposed)
    failure = (f"cannot add {wanted} to {RESERVED} (writing it needs root): reserve them yourself, `sysctl -w "
               f"net.ipv4.ip_local_reserved_ports={port_list(listening.reserved | {p for p, _ in exposed})}`, "
               f"or give the spec ports below {low}")
    return Step(host, "ports", "run",
                f"reserve {said_ports(exposed)} from the ephemeral range {low}-{high}, so that no outgoing "
                f"connection takes them first (net.ipv4.ip_local_reserved_ports, until a reboot)",
                commands=(Command(("sh", "-c", RESERVE_SCRIPT, "sh", wanted), failure=failure),), wave=wave)
