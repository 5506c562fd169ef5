"""Doctor's host tuning checks for vllm-ascend hosts (pure): what the tutorials set by hand before serving —
vm.swappiness=0, kernel.numa_balancing=0, the `performance` CPU governor — each a WARN with `--fix`."""

from __future__ import annotations

from collections import Counter

from deployctl.facts.model import HostFacts
from deployctl.plan.findings import PASS, SKIP, WARN, Finding, unknown

SYSCTL_FIX = "deployctl doctor --fix (sets it now and in /etc/sysctl.d/)"
GOVERNOR_FIX = "deployctl doctor --fix (sets it now and at every boot: deployctl-cpu-governor.service)"
PERFORMANCE = "performance"


def check_tuning(facts: HostFacts) -> tuple[Finding, ...]:
    """`swappiness`, `numa_balancing`, `cpu_governor`: SKIP where the kernel or the host has no such setting."""
    tuning = facts.tuning
    if tuning is None:
        return tuple(unknown(name, facts, "tuning", "sh", expected)
                     for name, expected in (("swappiness", "0"), ("numa_balancing", "0"),
                                            ("cpu_governor", PERFORMANCE)))
    findings = []
    for name, value in (("swappiness", tuning.swappiness), ("numa_balancing", tuning.numa_balancing)):
        if value is None:
            findings.append(Finding(name, SKIP, "not in this kernel", "0", None))
        else:
            findings.append(Finding(name, PASS if value == 0 else WARN, str(value), "0",
                                    None if value == 0 else SYSCTL_FIX))
    if not tuning.governors:
        findings.append(Finding("cpu_governor", SKIP, "no cpufreq on this host", PERFORMANCE, None))
    else:
        counts = Counter(tuning.governors)
        observed = ", ".join(f"{name} on {n} CPU{'s' * (n != 1)}" for name, n in sorted(counts.items()))
        good = set(counts) == {PERFORMANCE}
        findings.append(Finding("cpu_governor", PASS if good else WARN, observed, f"{PERFORMANCE} on every CPU",
                                None if good else GOVERNOR_FIX))
    return tuple(findings)


def tuning_to_fix(findings: tuple[Finding, ...]) -> tuple[str, ...]:
    """The WARNs `--fix` repairs on one host: `swappiness`, `numa_balancing`, `cpu_governor`."""
    return tuple(f.name for f in findings
                 if f.name in ("swappiness", "numa_balancing", "cpu_governor") and f.status == WARN)
