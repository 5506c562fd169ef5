"""Doctor rules for the RoCE NICs of the NPUs a disaggregated deployment uses (hccn_tool facts)."""

from __future__ import annotations

from typing import Mapping, Optional

from deployctl.facts.model import HostFacts
from deployctl.plan.findings import FAIL, PASS, SKIP, WARN, Finding, unknown

TLS_FIX = "make the TLS switch equal on every device of every host: hccn_tool -i <N> -tls -s enable 0"


def check_hccn(facts: HostFacts, devices_used: tuple[int, ...]) -> tuple[Finding, ...]:
    """hccn_ip, hccn_link, hccn_tls (within this host) and hccn_ping for the devices the spec uses."""
    if not devices_used:
        return ()
    if "hccn_tool" in facts.missing_tools:
        return (unknown("hccn_ip", facts, "hccn_ip", "hccn_tool", "a RoCE IP on every NPU used"),)
    return (*check_hccn_ip(facts, devices_used), *check_hccn_conf(facts, devices_used),
            *check_hccn_link(facts, devices_used), check_hccn_tls(facts, devices_used), *check_hccn_ping(facts))


def check_hccn_ip(facts: HostFacts, devices_used: tuple[int, ...]) -> tuple[Finding, ...]:
    expected = "a RoCE IP (hccn_tool -i N -ip -g)"
    findings, seen = [], []
    for npu in devices_used:
        device = facts.hccn_device(npu)
        configured = facts.hccn_conf.address(npu) if facts.hccn_conf else None
        if device and device.ip:
            seen.append(f"{npu}={device.ip.ipaddr}")
        elif configured:
            fix = f"hccn_tool -i {npu} -ip -s address {configured} netmask <mask> (it is only in /etc/hccn.conf)"
            findings.append(Finding("hccn_ip", WARN, f"NPU {npu}: no live IP; /etc/hccn.conf has {configured}",
                                    expected, fix, npu=npu))
        else:
            fix = f"hccn_tool -i {npu} -ip -s address <ip> netmask <mask>, and add address_{npu} to /etc/hccn.conf"
            findings.append(Finding("hccn_ip", FAIL, f"NPU {npu}: no RoCE IP", expected, fix, npu=npu))
    if not findings:
        return (Finding("hccn_ip", PASS, "NPU " + ", ".join(seen), expected, None),)
    return tuple(findings)


def check_hccn_conf(facts: HostFacts, devices_used: tuple[int, ...]) -> tuple[Finding, ...]:
    """/etc/hccn.conf agrees with the live NICs: HCCL reads the file, so one stale address out of many turns
    KV transfers slow or wrong while everything looks healthy (vllm-ascend PR #16847)."""
    expected = "address_N in /etc/hccn.conf = the NIC's live IP"
    if facts.hccn_conf is None:
        return ()  # the hccn_ip check already says what is missing
    findings = []
    for npu in devices_used:
        device, configured = facts.hccn_device(npu), facts.hccn_conf.address(npu)
        live = device.ip.ipaddr if device and device.ip else None
        if live and configured and live != configured:
            findings.append(Finding(
                "hccn_conf", FAIL, f"NPU {npu}: /etc/hccn.conf says {configured}, the NIC has {live}", expected,
                f"set address_{npu}={live} in /etc/hccn.conf (or give the NIC {configured}: "
                f"hccn_tool -i {npu} -ip -s address {configured} netmask <mask>)", npu=npu))
    if findings:
        return tuple(findings)
    return (Finding("hccn_conf", PASS, f"agrees on NPU {','.join(map(str, devices_used))}", expected, None),)


def check_hccn_link(facts: HostFacts, devices_used: tuple[int, ...]) -> tuple[Finding, ...]:
    expected = "link UP"
    findings = []
    for npu in devices_used:
        device = facts.hccn_device(npu)
        link = device.link if device else None
        if link is None:
            findings.append(Finding("hccn_link", WARN, f"NPU {npu}: link state unknown", expected, None, npu=npu))
        elif not link.up:
            fix = f"check the cable and switch port of NPU {npu}'s RoCE NIC (hccn_tool -i {npu} -link -g)"
            findings.append(Finding("hccn_link", FAIL, f"NPU {npu}: link {link.status}", expected, fix, npu=npu))
    listed = ",".join(map(str, devices_used))
    return tuple(findings) or (Finding("hccn_link", PASS, f"UP on NPU {listed}", expected, None),)


def _tls_by_device(facts: HostFacts, devices: Optional[tuple[int, ...]] = None) -> dict[int, bool]:
    return {d.device_id: d.tls.enabled for d in facts.hccn or ()
            if d.tls is not None and (devices is None or d.device_id in devices)}


def _on_off(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"


def check_hccn_tls(facts: HostFacts, devices_used: tuple[int, ...]) -> Finding:
    """Within one host every device used has the same TLS switch (across hosts: check_tls_consistency)."""
    expected = "the same TLS switch on every device"
    switches = _tls_by_device(facts, devices_used)
    if not switches:
        return Finding("hccn_tls", SKIP, "unknown", expected, None)
    if len(set(switches.values())) > 1:
        observed = ", ".join(f"NPU {npu} {_on_off(on)}" for npu, on in sorted(switches.items()))
        return Finding("hccn_tls", FAIL, observed, expected, TLS_FIX)
    (value,) = set(switches.values())
    return Finding("hccn_tls", PASS, f"{_on_off(value)} on NPU {','.join(map(str, sorted(switches)))}", expected, None)


def check_hccn_ping(facts: HostFacts) -> tuple[Finding, ...]:
    """Pings from this host's devices to its peers' device IPs (gather decides which pairs)."""
    expected = "every peer device IP answers"
    if not facts.hccn_pings:
        return (Finding("hccn_ping", SKIP, "no peer device pinged", expected, None),)
    findings = []
    for ping in facts.hccn_pings:
        observed = f"NPU {ping.device_id} -> {ping.target}: {ping.received}/{ping.transmitted} answered"
        if not ping.reachable:
            fix = f"check the RoCE route from NPU {ping.device_id} to {ping.target} (netmask, gateway, switch VLAN)"
            findings.append(Finding("hccn_ping", FAIL, observed, expected, fix, npu=ping.device_id))
        elif ping.received < ping.transmitted:
            findings.append(Finding("hccn_ping", WARN, observed, expected, None, npu=ping.device_id))
    return tuple(findings) or (Finding("hccn_ping", PASS, f"{len(facts.hccn_pings)} peers answered", expected, None),)


def check_tls_consistency(facts_by_host: Mapping[str, HostFacts]) -> dict[str, Finding]:
    """One `hccn_tls` finding per host: PASS when every device of every host has the same TLS switch.

    Hosts without TLS facts get SKIP; when the hosts disagree, every host with facts FAILs naming all."""
    switches = {host: _tls_by_device(facts) for host, facts in facts_by_host.items()}
    known = {host: set(values.values()) for host, values in switches.items() if values}
    expected = "the same TLS switch on every device of every host"
    summary = "; ".join(f"{host}: {'/'.join(_on_off(v) for v in sorted(values))}" for host, values in known.items())
    agree = len(set().union(*known.values())) <= 1 if known else True
    out = {}
    for host in facts_by_host:
        if host not in known:
            out[host] = Finding("hccn_tls", SKIP, "unknown", expected, None)
        elif agree:
            out[host] = Finding("hccn_tls", PASS, summary, expected, None)
        else:
            out[host] = Finding("hccn_tls", FAIL, summary, expected, TLS_FIX)
    return out
