"""vllm-ascend's data-parallel groups as a spec gives them, and the rules every set of groups obeys (pure): each
rule returns its violations as messages that quote the values, for the loader to locate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

KV_PORT_BASE, KV_PORT_STEP = 30000, 100
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

    @property
    def ranks_per_host(self) -> int:
        return self.dp // len(self.hosts)

    @property
    def kv_port_base(self) -> int:
        return self.kv_port if self.kv_port is not None else KV_PORT_BASE + KV_PORT_STEP * self.index

    @property
    def data_parallel_rpc_port(self) -> int:
        return self.rpc_port if self.rpc_port is not None else RPC_PORT_BASE + self.index

    @property
    def where(self) -> str:
        return f"{self.role} group {self.index}"

    def usable(self, cards: int) -> tuple[int, ...]:
        return self.devices if self.devices is not None else tuple(range(cards))


def group_shape_problems(group: DpGroup, cards: int) -> Iterator[str]:
    """dp tiles the hosts, tp is a power of two up to 16, and each host has the devices its ranks need."""
    if group.dp < 1 or group.dp % len(group.hosts):
        yield (f"{group.where}: dp {group.dp} cannot be spread evenly over {len(group.hosts)} host(s) "
               f"({', '.join(group.hosts)}): dp must be a positive multiple of the host count")
        return
    if group.tp < 1 or group.tp > MAX_TP or group.tp & (group.tp - 1):
        yield f"{group.where}: tp {group.tp} is not a power of two from 1 to {MAX_TP}"
        return
    need, usable = group.ranks_per_host * group.tp, group.usable(cards)
    if need > len(usable):
        yield (f"{group.where}: {group.ranks_per_host} rank(s) per host x tp {group.tp} = {need} devices, but each "
               f"host has {len(usable)} usable ({_ids(usable)})")


def roles_agree_problems(groups: Sequence[DpGroup]) -> Iterator[str]:
    """Every group of a role has one (dp, tp): the connector's config carries one pair per role."""
    for role in ("prefill", "decode"):
        shapes = {(g.dp, g.tp) for g in groups if g.role == role}
        if len(shapes) > 1:
            listed = "; ".join(f"{g.where}: dp {g.dp}, tp {g.tp}" for g in groups if g.role == role)
            yield f"every {role} group must have the same dp and tp ({listed})"


def device_problems(groups: Sequence[DpGroup], cards: int) -> Iterator[str]:
    """A device serves one rank across the whole deployment."""
    owner: dict[tuple[str, int], str] = {}
    for group in groups:
        if any(True for _ in group_shape_problems(group, cards)):
            continue  # its shape is already refused; its slices mean nothing
        usable = group.usable(cards)
        for host in group.hosts:
            for local in range(group.ranks_per_host):
                for device in usable[local * group.tp:(local + 1) * group.tp]:
                    taken = owner.setdefault((host, device), f"{group.where} rank {local} on {host}")
                    if not taken.startswith(f"{group.where} rank {local} "):
                        yield f"{host}: NPU {device} is used by {taken} and by {group.where} rank {local} on {host}"


def port_uses(group: DpGroup, launch: str) -> Iterator[tuple[str, int, str]]:
    """(host, port, what) for every port a group listens on."""
    for h, host in enumerate(group.hosts):
        if launch == "external":
            for local in range(group.ranks_per_host):
                yield host, group.port + local, f"{group.where} API port (rank {local} on {host})"
        elif h == 0:
            yield host, group.port, f"{group.where} API port"
        for offset in range(group.tp * group.ranks_per_host):
            yield host, group.kv_port_base + offset, f"{group.where} kv ports {group.kv_port_base}-" \
                                                     f"{group.kv_port_base + group.tp * group.ranks_per_host - 1}"
    yield group.hosts[0], group.data_parallel_rpc_port, f"{group.where} rpc port"


def port_problems(groups: Sequence[DpGroup], launch: str, proxy: Optional[tuple[str, int]] = None) -> Iterator[str]:
    """API, kv, rpc and proxy ports never overlap on a host (each overlap said once)."""
    seen: dict[tuple[str, int], str] = {}
    said: set[tuple[str, str, str]] = set()
    uses = [u for g in groups for u in port_uses(g, launch)] + ([(*proxy, "the proxy")] if proxy else [])
    for host, port, what in uses:
        first = seen.setdefault((host, port), what)
        if first != what and (host, first, what) not in said:
            said.add((host, first, what))
            yield f"{host}: port {port} is both {first} and {what}"


def _ids(devices: Sequence[int]) -> str:
    return ",".join(map(str, devices)) if devices else "none"
