"""What doctor checks where: hosts, the devices each must have free, and the hccn ping pairs (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from deployctl.errors import UsageError
from deployctl.spec.model import Host, Requirements, Spec, SshSettings
from deployctl.spec.profiles import ProfileChoice


@dataclass(frozen=True)
class Target:
    """One host to check and the NPUs/GPUs the spec puts on it."""

    host: Host
    devices: tuple[int, ...] = ()
    ports: tuple[tuple[int, str], ...] = ()  # (port, what listens there) once the spec is deployed
    hccl_env: tuple[tuple[str, str], ...] = ()  # HCCL variables the user's env sets for this host's containers


@dataclass(frozen=True)
class PingPair:
    """Ping `dst_host`'s device `dst_device` from `src_host`'s NPU `src_device` (hccn_tool -ping)."""

    src_host: str
    src_device: int
    dst_host: str
    dst_device: int


@dataclass(frozen=True)
class DoctorPlan:
    """Everything the checks need besides the facts."""

    targets: tuple[Target, ...]
    requirements: Requirements = field(default_factory=Requirements)
    platform: str = "ascend"
    disk_path: Optional[str] = None
    own_deployment: Optional[str] = None
    disaggregated: bool = False
    pings: tuple[PingPair, ...] = ()
    tuning: bool = False  # vllm-ascend hosts: swappiness, numa balancing, CPU governor
    weights_dest: Optional[str] = None  # compare the hosts' weights manifests (when deployctl syncs them)
    profile: Optional[ProfileChoice] = None  # vllm-ascend: the server profile, for its compatibility row

    def target(self, name: str) -> Target:
        for target in self.targets:
            if target.host.name == name:
                return target
        raise KeyError(name)

    def pings_from(self, host: str) -> tuple[PingPair, ...]:
        return tuple(p for p in self.pings if p.src_host == host)


def _devices_by_host(spec: Spec, role: Optional[str] = None) -> dict[str, tuple[int, ...]]:
    found: dict[str, set] = {}
    for instance in spec.instances:
        if role is None or instance.role == role:
            found.setdefault(instance.host, set()).update(instance.devices)
    return {host: tuple(sorted(devices)) for host, devices in found.items()}


def ping_pairs(spec: Spec) -> tuple[PingPair, ...]:
    """Prefill <-> decode NICs on different hosts, both ways. Each NIC is covered at least once rather than
    the full device x device product: a real `hccn_tool -ping` takes about 3 s, and 8 x 8 pairs would take minutes."""
    if spec.mode != "disaggregated":
        return ()
    prefill, decode = _devices_by_host(spec, "prefill"), _devices_by_host(spec, "decode")
    pairs: list[PingPair] = []
    for src_role, dst_role in ((prefill, decode), (decode, prefill)):
        for src_host, src_devices in src_role.items():
            for dst_host, dst_devices in dst_role.items():
                if src_host == dst_host or not src_devices or not dst_devices:
                    continue
                for i in range(max(len(src_devices), len(dst_devices))):
                    pair = PingPair(src_host, src_devices[i % len(src_devices)], dst_host,
                                    dst_devices[i % len(dst_devices)])
                    if pair not in pairs:
                        pairs.append(pair)
    return tuple(pairs)


def plan_for_spec(spec: Spec, only: tuple[str, ...] = ()) -> DoctorPlan:
    """The hosts that run instances (or those of them named in `only`, by name or address)."""
    devices = _devices_by_host(spec)
    hosts = spec.used_hosts
    if only:
        unknown = [h for h in only if not any(h in (host.name, host.address) for host in spec.hosts)]
        if unknown:
            raise UsageError(f"--host {unknown[0]}: not a host of {spec.name} "
                             f"(hosts: {', '.join(h.name for h in spec.hosts)})")
        hosts = tuple(h for h in spec.hosts if h.name in only or h.address in only)
    from deployctl.doctor.checks_hccl_env import hccl_env_for_host
    from deployctl.doctor.checks_ports import listen_ports
    from deployctl.servers import flavour_of

    return DoctorPlan(
        targets=tuple(Target(h, devices.get(h.name, ()), listen_ports(spec, h.name), hccl_env_for_host(spec, h.name))
                      for h in hosts),
        requirements=spec.requirements,
        platform=spec.platform,
        disk_path=spec.weights.dest,
        own_deployment=spec.name,
        disaggregated=spec.mode == "disaggregated",
        pings=tuple(p for p in ping_pairs(spec) if any(p.src_host == h.name for h in hosts)),
        weights_dest=spec.weights.dest if spec.weights.source else None,
        tuning="tuning" in flavour_of(spec).doctor_checks(spec),
        profile=spec.profile,
    )


def parse_host_arg(text: str, identity_file: Optional[str] = None, known_hosts: Optional[str] = None) -> Host:
    """`[user@]address[:port]` -> a Host named as written; user root and port 22 by default."""
    user, at, rest = text.rpartition("@")
    address, colon, port_text = rest.partition(":")
    if not address or (at and not user) or (colon and not port_text.isdigit()):
        raise UsageError(f"--host {text!r}: expected [USER@]ADDRESS[:PORT], e.g. root@192.0.2.11:22")
    port = int(port_text) if colon else 22
    if not 1 <= port <= 65535:
        raise UsageError(f"--host {text!r}: port {port} is not 1-65535")
    name = address if port == 22 else f"{address}:{port}"
    settings = SshSettings(user=user or "root", port=port, identity_file=identity_file, known_hosts=known_hosts)
    return Host(name=name, address=address, ssh=settings)


def plan_for_hosts(entries: tuple[str, ...], identity_file: Optional[str] = None,
                   known_hosts: Optional[str] = None) -> DoctorPlan:
    """No spec: the default requirements on each `--host`, no devices pinned, no disk path."""
    if not entries:
        raise UsageError("doctor needs a SPEC or at least one --host [USER@]ADDRESS[:PORT]")
    hosts = [parse_host_arg(e, identity_file, known_hosts) for e in entries]
    unique = tuple({h.name: h for h in hosts}.values())
    return DoctorPlan(targets=tuple(Target(h) for h in unique))
