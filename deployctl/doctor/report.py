"""Facts -> findings per host (pure), the contract's JSON document, and the table."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional

from deployctl.doctor.targets import DoctorPlan
from deployctl.facts.model import HostFacts
from deployctl.doctor.checks import check_host, check_tls_consistency, check_weights_identity
from deployctl.doctor.checks_hccl_env import check_hccl_env
from deployctl.doctor.checks_ports import check_ports
from deployctl.doctor.checks_profile import check_server_profile
from deployctl.doctor.checks_tuning import check_tuning
from deployctl.plan.findings import FAIL, Finding
from deployctl.redaction import redact


@dataclass(frozen=True)
class HostChecks:
    """One host's doctor findings, in check order."""

    host: str
    address: str
    reachable: bool
    findings: tuple[Finding, ...]

    @property
    def failed(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == FAIL)

    def finding(self, name: str) -> Optional[Finding]:
        for finding in self.findings:
            if finding.name == name:
                return finding
        return None

    def to_json(self) -> dict:
        return {"host": self.host, "address": self.address, "reachable": self.reachable,
                "checks": [f.to_json() for f in self.findings]}


def host_reports(plan: DoctorPlan, facts: Mapping[str, HostFacts],
                 ssh_fixes: Optional[Mapping[str, str]] = None,
                 weights: Optional[Mapping[str, Optional[str]]] = None) -> tuple[HostChecks, ...]:
    """One report per target, in plan order; `ssh_fixes` replaces the generic fix of an `ssh` FAIL
    (an unknown host key's fix is the exact trust command)."""
    identity = check_weights_identity(weights) if weights else {}
    tls = check_tls_consistency({n: f for n, f in facts.items() if f.reachable}) if plan.disaggregated else {}
    reports = []
    for target in plan.targets:
        name = target.host.name
        host_facts = facts[name]
        findings = check_host(plan.requirements, host_facts, platform=plan.platform, devices_used=target.devices,
                              own_deployment=plan.own_deployment, disaggregated=plan.disaggregated,
                              host=target.host)
        if name in tls and len(tls) > 1:  # across hosts: every device of every host has the same switch
            findings = tuple(tls[name] if f.name == "hccn_tls" else f for f in findings)
        if ssh_fixes and name in ssh_fixes:
            findings = tuple(replace(f, fix=ssh_fixes[name]) if f.name == "ssh" and f.status == FAIL else f
                             for f in findings)
        if name in identity:
            findings += (identity[name],)
        if host_facts.reachable:
            findings += check_ports(host_facts, target.ports, plan.own_deployment)
            findings += check_tuning(host_facts) if plan.tuning else ()
            findings += (check_server_profile(plan.profile, host_facts),) if plan.profile is not None else ()
            findings += check_hccl_env(host_facts, target.hccl_env)
        reports.append(HostChecks(name, target.host.address, host_facts.reachable, _redacted(findings)))
    return tuple(reports)


def _redacted(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """A finding quotes a host's words (npu-smi's process names and errors, hccn_tool's, a driver file's): every
    place doctor's findings reach (table, JSON, up's refusal) shows them through the one redaction."""
    return tuple(replace(f, observed=redact(f.observed), fix=f.fix and redact(f.fix)) for f in findings)


def document(reports: tuple[HostChecks, ...], fixes: Optional[list] = None) -> dict:
    """The contract's `doctor` JSON (plus `fixes` after --fix)."""
    doc = {"ok": not any(r.failed for r in reports), "hosts": [r.to_json() for r in reports]}
    if fixes is not None:
        doc["fixes"] = fixes
    return doc


def failure_lines(reports: tuple[HostChecks, ...]) -> list[str]:
    """`tb2 ip_forward: 0 (expected 1); fix: ...`: one line per FAIL."""
    return [f"{r.host} {f.name}: {f.observed} (expected {f.expected})" + (f"; fix: {f.fix}" if f.fix else "")
            for r in reports for f in r.failed]


def summary(reports: tuple[HostChecks, ...]) -> str:
    counts = {s: sum(1 for r in reports for f in r.findings if f.status == s) for s in ("FAIL", "WARN")}
    hosts_failed = sum(1 for r in reports if r.failed)
    if counts["FAIL"]:
        return f"{counts['FAIL']} check(s) failed on {hosts_failed} of {len(reports)} host(s)"
    warn = f" ({counts['WARN']} warning(s))" if counts["WARN"] else ""
    return f"all checks passed on {len(reports)} host(s){warn}"
