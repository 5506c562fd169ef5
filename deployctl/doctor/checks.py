"""The doctor's rules: pure functions from requirements and gathered facts to findings.

`up` refuses to change anything when one of these FAILs; `doctor` prints them. A missing tool (exit 127,
so a None fact) is a FAIL with an install fix, never a crash."""

from __future__ import annotations

import shlex
from typing import Mapping, Optional

from deployctl.facts.model import HostFacts
from deployctl.doctor.checks_gpu import (
    check_gpu_count,
    check_gpu_driver,
    check_gpu_free,
    check_gpu_memory,
    check_nvidia_runtime,
)
from deployctl.doctor.checks_hccn import check_hccn, check_tls_consistency
from deployctl.doctor.checks_npu import (
    GIB,
    check_driver,
    check_firmware,
    check_npu_count,
    check_npu_free,
    check_npu_health,
    check_npu_memory,
)
from deployctl.plan.findings import FAIL, PASS, SKIP, WARN, Finding, unknown
from deployctl.spec.model import Host, Requirements

__all__ = ["Finding", "check_host", "check_tls_consistency", "IP_FORWARD_FIX", "GIB"]

IP_FORWARD_FIX = "deployctl doctor --fix (sets net.ipv4.ip_forward=1 now and in /etc/sysctl.d/)"


def check_host(
    requirements: Requirements,
    facts: HostFacts,
    *,
    platform: str = "ascend",
    devices_used: tuple[int, ...] = (),
    own_deployment: Optional[str] = None,
    disaggregated: bool = False,
    host: Optional[Host] = None,
) -> tuple[Finding, ...]:
    """Every check of one host, in the order doctor prints them; an unreachable host gets only `ssh`.
    `host` (how it is reached) makes the `ssh` row concrete: the real ssh command, or `local (no SSH)`."""
    local = host is not None and host.is_local
    expected = "this machine (no SSH)" if local else "reachable over SSH"
    if not facts.reachable:
        return (Finding("ssh", FAIL, facts.error or "unreachable", expected, ssh_fix(host)),)
    head = (Finding("ssh", PASS, "local (no SSH)" if local else "connected", expected, None),)
    host = (check_ip_forward(requirements, facts), check_disk(requirements, facts))
    if platform == "gpu":
        return (
            *head,
            check_gpu_count(requirements, facts),
            *check_gpu_memory(requirements, facts, devices_used),
            check_gpu_driver(requirements, facts),
            check_docker(facts),
            check_nvidia_runtime(facts),
            *host,
            *check_gpu_free(facts, devices_used, own_deployment),
        )
    npu = (
        check_npu_count(requirements, facts),
        *check_npu_health(facts),
        check_npu_memory(requirements, facts),
        check_driver(requirements, facts),
        check_firmware(requirements, facts),
    )
    free = check_npu_free(facts, devices_used, own_deployment)
    hccn = check_hccn(facts, devices_used) if disaggregated else ()
    return head + npu + (check_docker(facts),) + host + free + hccn


def ssh_fix(host: Optional[Host]) -> str:
    """What to try by hand when a host cannot be reached: the exact ssh command deployctl's settings mean."""
    if host is None:
        return "check the host's address, port, user and key and its known_hosts entry"
    if host.is_local:
        return "run deployctl as a user that may run commands on this machine"
    argv = ["ssh", "-p", str(host.ssh.port)]
    if host.ssh.identity_file:
        argv += ["-i", host.ssh.identity_file]
    if host.ssh.jump:
        argv += ["-J", host.ssh.jump]
    argv.append(f"{host.ssh.user}@{host.address}")
    return f"check the host's address, port, user and key ({shlex.join(argv)}) and its known_hosts entry"


def check_docker(facts: HostFacts) -> Finding:
    expected = "docker installed, daemon reachable"
    version = facts.docker
    if version is None:
        return unknown("docker", facts, "docker_version", "docker", expected)
    if version.server is None:
        reason = facts.docker_error or "no server version in the answer"
        fix = "start the daemon (systemctl enable --now docker) and let the SSH user use /var/run/docker.sock"
        return Finding("docker", FAIL, f"client {version.client}; daemon not reachable: {reason}", expected, fix)
    return Finding("docker", PASS, f"client {version.client}, server {version.server}", expected, None)


def check_ip_forward(requirements: Requirements, facts: HostFacts) -> Finding:
    value = facts.ip_forward
    if not requirements.ip_forward:
        return Finding("ip_forward", SKIP, "not checked" if value is None else str(value), "not required", None)
    if value is None:
        return unknown("ip_forward", facts, "ip_forward", "sysctl", "1")
    if value == 1:
        return Finding("ip_forward", PASS, "1", "1", None)
    return Finding("ip_forward", FAIL, str(value), "1", IP_FORWARD_FIX)


def check_disk(requirements: Requirements, facts: HostFacts) -> Finding:
    need_gb = requirements.free_disk_gb
    where = facts.disk_path or (facts.disk.mounted_on if facts.disk else "the weights directory")
    expected = f">= {need_gb:g} GB free at {where}"
    if facts.disk is None:
        if not need_gb:
            return Finding("disk", SKIP, "not checked", expected, None)
        return unknown("disk", facts, "disk", "df", expected)
    free_gb = facts.disk.available_bytes / GIB
    observed = f"{free_gb:.1f} GB free on {facts.disk.mounted_on} ({facts.disk.filesystem})"
    if facts.disk.available_bytes >= need_gb * GIB:
        return Finding("disk", PASS, observed, expected, None)
    fix = f"free {need_gb - free_gb:.1f} GB more on {facts.disk.mounted_on}, or set weights.dest on a larger filesystem"
    return Finding("disk", FAIL, observed, expected, fix)


def check_weights_identity(digests: Mapping[str, Optional[str]]) -> dict[str, Finding]:
    """`weights`: every host holds the same synced weights (manifest digest); hosts missing a manifest WARN."""
    synced = {d for d in digests.values() if d}
    if not synced:
        return {h: Finding("weights", SKIP, "not synced by deployctl", "one manifest digest on every host",
                           "deployctl weights sync SPEC") for h in digests}
    findings = {}
    for host, digest in digests.items():
        observed = (digest or "no manifest")[:19]
        if len(synced) > 1:
            status = FAIL
        else:
            status = PASS if digest else WARN
        fix = "" if status == PASS else "deployctl weights sync SPEC (hosts must serve identical weights)"
        findings[host] = Finding("weights", status, observed, "identical on every host", fix)
    return findings
