"""Run the probes on hosts: one batch (one round trip) per host, a second only for hccn pings.

The probes come from facts.probes.probes_for; two are replaced by constant scripts so that one round trip
suffices: df of the nearest existing parent of weights.dest, and `docker ps` + `docker inspect` together."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Optional

from deployctl.errors import HostError
from deployctl.facts import docker, system
from deployctl.facts.assemble import ProbeOutput, host_facts_from
from deployctl.facts.model import HostFacts
from deployctl.facts.probes import Probe, hccn_ping_probe, probes_for
from deployctl.doctor.checks_hccl_env import NEEDS_ADDRESSES
from deployctl.facts.weights_state import manifest_probe
from deployctl.gather import run_probes
from deployctl.doctor.targets import DoctorPlan, PingPair, Target
from deployctl.transport import Transport

# df fails on a path that does not exist yet (weights not synced): walk up to the first existing parent.
NEAREST_DF = 'p=$1; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; exec df -Pk "$p"'
# the running containers' devices and labels; `[]` when none run
CONTAINERS = ('ids=$(docker ps --quiet --no-trunc) || exit $?; '
              'if [ -n "$ids" ]; then exec docker inspect $ids; fi; echo "[]"')

Results = list[tuple[Probe, ProbeOutput]]


def doctor_probes(plan: DoctorPlan, target: Target) -> tuple[Probe, ...]:
    """probes_for(...) with df and the container list made single-round-trip scripts."""
    out = []
    for probe in probes_for(plan.platform, target.devices, plan.disk_path, disaggregated=plan.disaggregated):
        if probe.key == "disk":
            probe = Probe(("sh", "-c", NEAREST_DF, "sh", plan.disk_path or "/"), system.parse_df, "disk",
                          tool_name="df")
        elif probe.key == "container_list":
            # parse_failed_output: `docker inspect` exits 1 when a container vanished after `docker ps`,
            # yet prints the others
            probe = Probe(("sh", "-c", CONTAINERS), docker.parse_docker_inspect, "containers",
                          parse_failed_output=True, tool_name="docker")
        out.append(probe)
    if plan.weights_dest:  # the manifest a weights sync left: hosts must serve identical weights
        out.append(manifest_probe(plan.weights_dest))
    if plan.tuning:
        from deployctl.facts.host_tuning import tuning_probe

        out.append(tuning_probe())
    if target.ports:  # the ports the deployment will listen on: free, and outside the ephemeral range
        from deployctl.facts.listening import listening_probe

        out.append(listening_probe())
    if any(name in NEEDS_ADDRESSES for name, _ in target.hccl_env):  # HCCL_IF_IP / *_SOCKET_IFNAME typed by hand
        from deployctl.ranktable.host_address import addresses_probe

        out.append(addresses_probe())
    return tuple(out)


def device_ip(facts: HostFacts, device: int) -> Optional[str]:
    """A device's RoCE address: the live one, else /etc/hccn.conf's."""
    live = facts.hccn_device(device)
    if live is not None and live.ip is not None:
        return live.ip.ipaddr
    return facts.hccn_conf.address(device) if facts.hccn_conf else None


def ping_probes(pairs: tuple[PingPair, ...], facts_by_host: Mapping[str, HostFacts]) -> tuple[Probe, ...]:
    """The pings whose peer address is known; a failed ping still prints its summary (exit 1)."""
    probes = []
    for pair in pairs:
        peer = facts_by_host.get(pair.dst_host)
        address = device_ip(peer, pair.dst_device) if peer is not None and peer.reachable else None
        if address:
            probes.append(replace(hccn_ping_probe(pair.src_device, address), parse_failed_output=True))
    return tuple(probes)


def unreachable(error: HostError) -> HostFacts:
    return HostFacts(reachable=False, error=error.message.partition(": ")[2] or error.message)


def gather_facts(
    plan: DoctorPlan,
    transports: Mapping[str, Transport],
    *,
    on_host: Optional[Callable[[str, HostFacts], None]] = None,
    map_hosts: Optional[Callable] = None,
) -> dict[str, HostFacts]:
    """HostFacts of every target whose transport is given, all hosts in parallel; a host that fails
    mid-way is unreachable, not a crash. `on_host` is told as each host answers (the live display)."""
    from deployctl.fanout import on_hosts

    map_hosts = map_hosts or on_hosts
    names = [t.host.name for t in plan.targets if t.host.name in transports]
    raw: dict[str, Results] = {}

    def first(transport: Transport):
        try:
            raw[transport.name] = run_probes(transport, doctor_probes(plan, plan.target(transport.name)))
            facts = host_facts_from(raw[transport.name], disk_path=plan.disk_path)
        except HostError as error:
            facts = unreachable(error)
        if on_host and not plan.pings_from(transport.name):
            on_host(transport.name, facts)
        return facts

    facts = map_hosts({n: transports[n] for n in names}, first)
    pinging = {n: transports[n] for n in names if plan.pings_from(n) and facts[n].reachable}

    def second(transport: Transport):
        try:
            results = raw[transport.name] + run_probes(transport, ping_probes(plan.pings_from(transport.name), facts))
            host = host_facts_from(results, disk_path=plan.disk_path)
        except HostError as error:
            host = unreachable(error)
        if on_host:
            on_host(transport.name, host)
        return host

    if pinging:
        facts.update(map_hosts(pinging, second))
    for name in names:
        if on_host and plan.pings_from(name) and name not in pinging:
            on_host(name, facts[name])
    return facts
