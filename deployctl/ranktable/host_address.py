"""Which address of this host goes into `server_ip`: one actually bound here, never reverse DNS.

Pure parsers of `ip -4 -o addr show` and `ip -4 route show default`, and the choice between addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from deployctl.errors import FactParseError, RanktableError

if TYPE_CHECKING:
    from deployctl.facts.probe import Probe

IP_ADDR_ARGV = ("ip", "-4", "-o", "addr", "show")
DEFAULT_ROUTE_ARGV = ("ip", "-4", "route", "show", "default")


@dataclass(frozen=True)
class BoundAddress:
    interface: str
    address: str  # without the prefix length
    scope: str  # global | host | link ...


def parse_ip_addr(text: str) -> tuple[BoundAddress, ...]:
    """`4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\ ...`, one line per address."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if len(words) < 4 or "inet" not in words or words.index("inet") + 1 >= len(words):
            raise FactParseError(" ".join(IP_ADDR_ARGV), number, line, "'N: IFACE inet A.B.C.D/LEN ... scope S'")
        at = words.index("inet")
        scope = words[words.index("scope") + 1] if "scope" in words[:-1] else "global"
        out.append(BoundAddress(words[1].rstrip(":"), words[at + 1].partition("/")[0], scope))
    return tuple(out)


def parse_default_route(text: str) -> Optional[str]:
    """The interface of `default via G dev IFACE ...`, or None when there is no default route."""
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["default"] and "dev" in words[:-1]:
            return words[words.index("dev") + 1]
    return None


def choose_host_ip(addresses: Sequence[BoundAddress], default_interface: Optional[str]) -> str:
    """The default route's interface's address, else the first global one; loopback never."""
    usable = [a for a in addresses if a.scope != "host" and not a.address.startswith("127.")]
    preferred = [a for a in usable if a.interface == default_interface] or [a for a in usable if a.scope == "global"]
    if not preferred:
        raise RanktableError("cannot tell this host's address: no global IPv4 address is bound here",
                             hint="pass --host-ip with the address the other hosts reach this one at")
    return preferred[0].address


@dataclass(frozen=True)
class HostAddresses:
    """What `ip` said about this host: its IPv4 addresses and the default route's interface."""

    addresses: tuple[BoundAddress, ...]
    default_interface: Optional[str]

    def choose(self) -> str:
        return choose_host_ip(self.addresses, self.default_interface)


SEPARATOR = "@@route"
# both answers in one command: the addresses, a marker, the default route (absent: no default route)
ADDRESSES_ARGV = ("sh", "-c", f'{" ".join(IP_ADDR_ARGV)} && echo {SEPARATOR} && {{ {" ".join(DEFAULT_ROUTE_ARGV)} || true; }}')


def parse_host_addresses(text: str) -> HostAddresses:
    addresses, _, route = text.partition(SEPARATOR + "\n")
    return HostAddresses(parse_ip_addr(addresses), parse_default_route(route))


def addresses_probe() -> "Probe":
    """The host's IPv4 addresses with their interfaces, and its default route's interface."""
    from deployctl.facts.probe import Probe

    return Probe(ADDRESSES_ARGV, parse_host_addresses, "bound_addresses", tool_name="ip")


def interface_carrying(addresses: Sequence[BoundAddress], address: str) -> Optional[str]:
    """The network interface that holds `address` (vllm-ascend's *_SOCKET_IFNAME), None when none does."""
    for bound in addresses:
        if bound.address == address:
            return bound.interface
    return None
