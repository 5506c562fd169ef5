"""vllm-ascend's data-parallel groups as a spec gives them, where their ranks land (hosts, devices, servers), and
the rules every set of groups obeys (pure): each rule returns its violations as messages that quote the values,
for the loader to locate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from deployctl.spec.port_uses import ids as _ids

if TYPE_CHECKING:
    from deployctl.spec.model import Instance

KV_PORT_STEP = 100
# Mooncake's AscendDirectTransport binds random ports in [20000, 20000 + 1000 x NPUs per host); a kv_port there
# fails now and then with "Address already in use" (vllm-ascend #6455, #8938). The default base sits just above
# it: 28000 on 8-NPU hosts, 36000 on 16-NPU hosts
# (vllm-ascend HEAD:docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md:219-230).
CONNECTOR_RANGE_START, CONNECTOR_PORTS_PER_NPU = 20000, 1000
MIN_RANGE_NPUS = 8
RPC_PORT_BASE = 12345
MAX_TP = 16


@dataclass(frozen=True)
class DpGroup:
    """One DP group as the spec gives it."""

    role: str  # prefill | decode | mixed
    index: int  # across the deployment
    hosts: tuple[str, ...]
    dp: int
    tp: int
    port: int
    expert_parallel: bool = False
    devices: Optional[tuple[int, ...]] = None  # usable on each host; None: 0..cards-1
    kv_port: Optional[int] = None
    rpc_port: Optional[int] = None
    number: Optional[int] = None  # its position among its role's groups (default: index), as the spec lists it
    kv_port_default: Optional[int] = None  # the default base for its hosts' NPU count (None: 8-NPU hosts)

    @property
    def label(self) -> str:
        """`decode0`: the group's name in container names and engine ids."""
        return f"{self.role}{self.index if self.number is None else self.number}"

    @property
    def binds_kv_ports(self) -> bool:
        """Only a P/D server runs the KV connector (--kv-transfer-config, servers/vllm_ascend/upstream.py); a mixed
        one binds none."""
        return self.role != "mixed"

    @property
    def ranks_per_host(self) -> int:
        return self.dp // len(self.hosts)

    @property
    def kv_port_base(self) -> int:
        if self.kv_port is not None:
            return self.kv_port
        base = self.kv_port_default if self.kv_port_default is not None else default_kv_port(MIN_RANGE_NPUS)
        return base + KV_PORT_STEP * self.index

    @property
    def data_parallel_rpc_port(self) -> int:
        return self.rpc_port if self.rpc_port is not None else RPC_PORT_BASE + self.index

    @property
    def where(self) -> str:
        return f"{self.role} group {self.index if self.number is None else self.number}"

    def usable(self, cards: int) -> tuple[int, ...]:
        return self.devices if self.devices is not None else tuple(range(cards))


def connector_port_range(npus: int) -> tuple[int, int]:
    """[first, end) of the ports Mooncake's transport picks at random on a host with `npus` NPUs."""
    return CONNECTOR_RANGE_START, CONNECTOR_RANGE_START + CONNECTOR_PORTS_PER_NPU * max(npus, MIN_RANGE_NPUS)


def default_kv_port(npus: int) -> int:
    """The first kv_port base clear of the connector's random range: 28000 (8 NPUs), 36000 (16 NPUs)."""
    return connector_port_range(npus)[1]


def dp_group(role: str, index: int, hosts: Sequence[str], dp: int, tp: int, port: int, cards: int, **keys) -> DpGroup:
    """A group of a spec whose hosts have `cards` NPUs: its default kv_port base is the one for that count. The
    renderer (build.py) and validate's port checks (rules_upstream.py) both build their groups here, so they agree
    on every kv port (validate once checked a 16-NPU host's ports from 28000 while the servers used 36000)."""
    return DpGroup(role, index, tuple(hosts), dp, tp, port, kv_port_default=default_kv_port(cards), **keys)


@dataclass(frozen=True)
class Rank:
    """One data-parallel rank: its global rank, its index on its host, and the devices it owns."""

    host: str
    rank: int
    local: int
    devices: tuple[int, ...]


@dataclass(frozen=True)
class Server:
    """One `vllm serve` process (one container): the ranks it runs on one host."""

    group: DpGroup
    host: str
    ranks: tuple[Rank, ...]
    port: Optional[int]  # the API port; None for a headless server
    external: bool

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(d for r in self.ranks for d in r.devices)

    @property
    def headless(self) -> bool:
        return self.port is None

    @property
    def kv_port(self) -> int:
        """The connector's base port, one per group: the connector adds rank x tp + tp rank itself."""
        return self.group.kv_port_base

    @property
    def name(self) -> str:
        """`prefill0-node1` (internal) or `prefill0-r3` (external): unique in the deployment."""
        where = f"r{self.ranks[0].rank}" if self.external else self.host
        return f"{self.group.label}-{where}"

    @property
    def bound_ports(self) -> tuple[tuple[str, int], ...]:
        """(key, port) it binds beside its API port: its kv ports (where its group runs the connector) and, on the
        group's first host, the rpc (DP master) port."""
        group = self.group
        kv = tuple(("kv_port", p) for p in kv_ports(group, self.host)) if group.binds_kv_ports else ()
        return kv + ((("rpc_port", group.data_parallel_rpc_port),) if self.host == group.hosts[0] else ())


@dataclass(frozen=True)
class UpstreamTopology:
    """server vllm-ascend: how its DP groups launch, their KV connector and the proxy in front (`Spec.upstream`)."""

    dp_launch: str  # internal | external
    groups: tuple[DpGroup, ...]  # prefill groups then decode groups, or the mixed groups
    connector: Optional[str] = None  # disaggregated: mooncake | mooncake_hybrid


def with_server(instance: "Instance", server: Server) -> "Instance":
    """The instance running `server`, in its group's unit (replaced and restarted together: plan/units.py)."""
    return replace(instance, server=server, unit=server.group.label)


def ranks_of(group: DpGroup, cards: int) -> tuple[Rank, ...]:
    """Ranks in order, spread evenly over the group's hosts in their order, each `tp` consecutive usable devices."""
    usable = group.usable(cards)
    ranks = []
    for h, host in enumerate(group.hosts):
        for local in range(group.ranks_per_host):
            devices = usable[local * group.tp:(local + 1) * group.tp]
            ranks.append(Rank(host, h * group.ranks_per_host + local, local, tuple(devices)))
    return tuple(ranks)


def servers_of(group: DpGroup, cards: int, launch: str) -> tuple[Server, ...]:
    """internal: one server per host, the first host's serving the API, the others headless;
    external: one server per rank, each with its own API port (port + local index)."""
    ranks = ranks_of(group, cards)
    if launch == "external":
        return tuple(Server(group, r.host, (r,), group.port + r.local, True) for r in ranks)
    servers = []
    for h, host in enumerate(group.hosts):
        mine = tuple(r for r in ranks if r.host == host)
        servers.append(Server(group, host, mine, group.port if h == 0 else None, False))
    return tuple(servers)


def kv_ports(group: DpGroup, host: str) -> tuple[int, ...]:
    """The ports the Mooncake connector binds on `host`: kv_port + global rank x tp + tp rank, per rank there."""
    h = group.hosts.index(host)
    first = group.kv_port_base + h * group.ranks_per_host * group.tp
    return tuple(range(first, first + group.ranks_per_host * group.tp))


@dataclass(frozen=True)
class Violation:
    """A rule broken by a group (None: the proxy), at one of its keys, said with its values."""

    group: Optional[DpGroup]
    key: str  # the key of the group the message is about: dp, tp, devices, port, kv_port, rpc_port, hosts
    message: str


def group_shape_problems(group: DpGroup, cards: int) -> Iterator[Violation]:
    """dp tiles the hosts, tp is a power of two up to 16, and each host has the devices its ranks need."""
    if group.dp < 1 or group.dp % len(group.hosts):
        yield Violation(group, "dp", f"{group.where}: dp {group.dp} cannot be spread evenly over "
                        f"{len(group.hosts)} host(s) ({', '.join(group.hosts)}): dp must be a positive multiple "
                        f"of the host count")
        return
    if group.tp < 1 or group.tp > MAX_TP or group.tp & (group.tp - 1):
        yield Violation(group, "tp", f"{group.where}: tp {group.tp} is not a power of two from 1 to {MAX_TP}")
        return
    need, usable = group.ranks_per_host * group.tp, group.usable(cards)
    if need > len(usable):
        yield Violation(group, "devices" if group.devices is not None else "tp",
                        f"{group.where}: {group.ranks_per_host} rank(s) per host x tp {group.tp} = {need} devices, "
                        f"but each host has {len(usable)} usable ({_ids(usable)})")


def roles_agree_problems(groups: Sequence[DpGroup]) -> Iterator[Violation]:
    """Every group of a role has one (dp, tp): the connector's config carries one pair per role."""
    for role in ("prefill", "decode"):
        mine = [g for g in groups if g.role == role]
        for group in mine[1:]:
            if (group.dp, group.tp) != (mine[0].dp, mine[0].tp):
                key = "dp" if group.dp != mine[0].dp else "tp"
                yield Violation(group, key, f"{group.where} has dp {group.dp}, tp {group.tp}, but {mine[0].where} "
                                f"has dp {mine[0].dp}, tp {mine[0].tp}: every {role} group must have the same dp "
                                f"and tp (the connector's config carries one pair per role)")


def device_problems(groups: Sequence[DpGroup], cards: int, machine=lambda host: host) -> Iterator[Violation]:
    """A device serves one rank across the whole deployment (`machine`: a host name's machine)."""
    owner: dict[tuple[str, int], str] = {}
    clashes: dict[tuple[DpGroup, str, str], list[int]] = {}
    for group in groups:
        if any(True for _ in group_shape_problems(group, cards)):
            continue  # its shape is already refused; its slices mean nothing
        for rank in ranks_of(group, cards):
            for device in rank.devices:
                mine = f"{group.where} rank {rank.rank} on {rank.host}"
                taken = owner.setdefault((machine(rank.host), device), mine)
                if taken != mine:
                    clashes.setdefault((group, taken, mine), []).append(device)
    for (group, taken, mine), devices in clashes.items():
        yield Violation(group, "devices" if group.devices is not None else "hosts",
                        f"{mine.rsplit(' on ', 1)[1]}: {'NPU' if len(devices) == 1 else 'NPUs'} {_ids(devices)} "
                        f"{'is' if len(devices) == 1 else 'are'} "
                        f"used by {taken} and by {mine}")


def port_uses(group: DpGroup, launch: str) -> Iterator[tuple[str, int, str, str]]:
    """(host, port, key, what) for every port a group listens on; `key` is the group key that sets it."""
    for h, host in enumerate(group.hosts):
        if launch == "external":
            last = group.port + group.ranks_per_host - 1
            for local in range(group.ranks_per_host):
                yield host, group.port + local, "port", f"{group.where} API ports {group.port}-{last}" \
                    if last > group.port else f"{group.where} API port"
        elif h == 0:
            yield host, group.port, "port", f"{group.where} API port"
        ports = kv_ports(group, host) if group.binds_kv_ports else ()
        for port in ports:
            yield host, port, "kv_port", f"{group.where} kv ports {ports[0]}-{ports[-1]}"
    yield group.hosts[0], group.data_parallel_rpc_port, "rpc_port", f"{group.where} rpc port"

