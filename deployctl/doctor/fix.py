"""`doctor --fix`: the safe repairs. Only ip_forward: now (sysctl -w) and after a reboot (/etc/sysctl.d)."""

from __future__ import annotations

from dataclasses import dataclass

from deployctl.doctor.report import HostReport
from deployctl.errors import HostError
from deployctl.plan.findings import FAIL
from deployctl.plan.model import Command
from deployctl.transport import Transport

SYSCTL_FILE = "/etc/sysctl.d/99-deployctl.conf"
SYSCTL_CONTENT = b"# written by deployctl doctor --fix: vLLM/HCCL serving needs forwarding\nnet.ipv4.ip_forward = 1\n"
SYSCTL_NOW = ("sysctl", "-w", "net.ipv4.ip_forward=1")


@dataclass(frozen=True)
class FixOutcome:
    host: str
    check: str
    actions: tuple[str, ...]
    error: str = ""

    def to_json(self) -> dict:
        out = {"host": self.host, "check": self.check, "changed": bool(self.actions), "actions": list(self.actions)}
        if self.error:
            out["error"] = self.error
        return out


def hosts_to_fix(reports: tuple[HostReport, ...]) -> tuple[str, ...]:
    """Hosts whose ip_forward FAILs with a value read (0): the one repair that is safe to make."""
    return tuple(r.host for r in reports
                 if (f := r.finding("ip_forward")) is not None and f.status == FAIL and f.observed == "0")


def fix_ip_forward(transport: Transport) -> FixOutcome:
    """Set it now and persist it; running both again changes nothing (same value, same file)."""
    done = []
    try:
        result = transport.run(Command(SYSCTL_NOW), timeout=30)
        if not result.ok:
            return FixOutcome(transport.name, "ip_forward", (),
                              f"{' '.join(SYSCTL_NOW)} failed: {(result.stderr or result.stdout).strip()}")
        done.append(" ".join(SYSCTL_NOW))
        transport.put(SYSCTL_FILE, SYSCTL_CONTENT, mode=0o644)
        done.append(f"wrote {SYSCTL_FILE} (net.ipv4.ip_forward = 1)")
    except HostError as error:
        return FixOutcome(transport.name, "ip_forward", tuple(done), error.message)
    return FixOutcome(transport.name, "ip_forward", tuple(done))
