"""Which TCP ports a host listens on, and its ephemeral port range: a pure parser of
`cat /proc/sys/net/ipv4/ip_local_port_range /proc/net/tcp /proc/net/tcp6` (no ss or netstat needed)."""

from __future__ import annotations

from dataclasses import dataclass

from deployctl.errors import FactParseError
from deployctl.facts.probe import Probe

PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LISTEN = "0A"  # the kernel's TCP_LISTEN state in /proc/net/tcp
LISTENING_ARGV = ("cat", PORT_RANGE, "/proc/net/tcp", "/proc/net/tcp6")


@dataclass(frozen=True)
class Listening:
    """The host's listening TCP ports (IPv4 and IPv6) and the range the kernel picks outgoing ports from."""

    ports: frozenset[int]
    ephemeral: tuple[int, int]

    def ephemeral_holds(self, port: int) -> bool:
        return self.ephemeral[0] <= port <= self.ephemeral[1]


def parse_listening(text: str) -> Listening:
    lines = text.splitlines()
    words = lines[0].split() if lines else []
    if len(words) != 2 or not all(w.isdigit() for w in words):
        raise FactParseError(" ".join(LISTENING_ARGV), 1, lines[0] if lines else "", "'LOW<TAB>HIGH'")
    ports = set()
    for number, line in enumerate(lines[1:], 2):
        fields = line.split()
        if not fields or fields[0] == "sl":
            continue  # a table's header
        if len(fields) < 4 or ":" not in fields[1]:
            raise FactParseError(" ".join(LISTENING_ARGV), number, line, "'N: ADDR:PORT ADDR:PORT ST ...'")
        if fields[3] == LISTEN:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return Listening(frozenset(ports), (int(words[0]), int(words[1])))


def listening_probe() -> Probe:
    return Probe(LISTENING_ARGV, parse_listening, "listening")
