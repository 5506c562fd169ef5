"""Which TCP ports a host listens on, its ephemeral port range and the ports reserved from it: a pure parser of
`cat ip_local_port_range ip_local_reserved_ports /proc/net/tcp /proc/net/tcp6` (no ss or netstat needed)."""

from __future__ import annotations

from dataclasses import dataclass

from deployctl.errors import FactParseError
from deployctl.facts.probe import Probe

PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
# Ports the kernel never hands out as an outgoing connection's own (Documentation/networking/ip-sysctl.rst
# ip_local_reserved_ports): `8080,36100-36131`, an empty line when none.
RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"
LISTEN = "0A"  # the kernel's TCP_LISTEN state in /proc/net/tcp
LISTENING_ARGV = ("cat", PORT_RANGE, RESERVED, "/proc/net/tcp", "/proc/net/tcp6")


@dataclass(frozen=True)
class Listening:
    """The host's listening TCP ports (IPv4 and IPv6), the range the kernel picks outgoing ports from, and the
    ports reserved from that range."""

    ports: frozenset[int]
    ephemeral: tuple[int, int]
    reserved: frozenset[int] = frozenset()

    def ephemeral_holds(self, port: int) -> bool:
        return self.ephemeral[0] <= port <= self.ephemeral[1]

    def exposed(self, port: int) -> bool:
        """An outgoing connection may take `port` before a server binds it: in the range and not reserved."""
        return self.ephemeral_holds(port) and port not in self.reserved


def parse_listening(text: str) -> Listening:
    lines = text.splitlines()
    words = lines[0].split() if lines else []
    if len(words) != 2 or not all(w.isdigit() for w in words):
        raise FactParseError(" ".join(LISTENING_ARGV), 1, lines[0] if lines else "", "'LOW<TAB>HIGH'")
    if len(lines) < 2:
        raise FactParseError(" ".join(LISTENING_ARGV), 2, "", "the reserved ports: 'PORT,LOW-HIGH' or nothing")
    reserved = parse_port_list(lines[1], 2)
    ports = set()
    for number, line in enumerate(lines[2:], 3):
        fields = line.split()
        if not fields or fields[0] == "sl":
            continue  # a table's header
        if len(fields) < 4 or ":" not in fields[1]:
            raise FactParseError(" ".join(LISTENING_ARGV), number, line, "'N: ADDR:PORT ADDR:PORT ST ...'")
        if fields[3] == LISTEN:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return Listening(frozenset(ports), (int(words[0]), int(words[1])), reserved)


def parse_port_list(line: str, number: int = 1) -> frozenset[int]:
    """`8080,36100-36131` (the kernel's list format) -> the ports; an empty line -> none."""
    out: set[int] = set()
    for item in filter(None, line.strip().split(",")):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise FactParseError(" ".join(LISTENING_ARGV), number, line, "'PORT,LOW-HIGH' or nothing")
        out.update(range(int(low), int(high or low) + 1))
    return frozenset(out)


def port_list(ports) -> str:
    """The kernel's list format for `ports`: runs joined (`36100-36131,8080` sorted: `8080,36100-36131`)."""
    runs: list[list[int]] = []
    for port in sorted(set(ports)):
        if runs and port == runs[-1][1] + 1:
            runs[-1][1] = port
        else:
            runs.append([port, port])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def listening_probe() -> Probe:
    # parse_failed_output: a host without IPv6 has no /proc/net/tcp6; cat prints the rest and exits 1
    return Probe(LISTENING_ARGV, parse_listening, "listening", parse_failed_output=True)
