"""`doctor --fix`: the safe repairs. Only ip_forward: now (sysctl -w) and after a reboot, under both
systemd-sysctl and procps `sysctl --system`, whatever other sysctl files say (sysctl_persist.py on the host)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from deployctl.doctor.report import HostChecks
from deployctl.errors import HostError
from deployctl.plan.findings import FAIL
from deployctl.core import Command
from deployctl.transport import Transport

# "zz-" sorts after every numbered file, Debian's 99-sysctl.conf (a link to /etc/sysctl.conf) included.
SYSCTL_FILE = "/etc/sysctl.d/zz-deployctl.conf"
OLD_SYSCTL_FILES = ("/etc/sysctl.d/99-deployctl.conf",)  # earlier releases' name: it lost to 99-sysctl.conf
SYSCTL_CONTENT = "# written by deployctl doctor --fix: vLLM/HCCL serving needs forwarding\nnet.ipv4.ip_forward = 1\n"
SYSCTL_NOW = ("sysctl", "-w", "net.ipv4.ip_forward=1")


@dataclass(frozen=True)
class FixOutcome:
    host: str
    check: str
    actions: tuple[str, ...]
    error: str = ""
    files: tuple[str, ...] = ()

    def to_json(self) -> dict:
        out = {"host": self.host, "check": self.check, "changed": bool(self.actions), "actions": list(self.actions),
               "files": list(self.files)}
        if self.error:
            out["error"] = self.error
        return out


def hosts_to_fix(reports: tuple[HostChecks, ...]) -> tuple[str, ...]:
    """Hosts whose ip_forward FAILs with a value read (0): the one repair that is safe to make."""
    return tuple(r.host for r in reports
                 if (f := r.finding("ip_forward")) is not None and f.status == FAIL and f.observed == "0")


@lru_cache(maxsize=1)
def persist_program() -> str:
    return (Path(__file__).parent / "sysctl_persist.py").read_text()


def persist_command() -> Command:
    """The host program that makes 1 the value both loaders end with; idempotent (a second run changes nothing)."""
    return Command(("python3", "-c", persist_program(), SYSCTL_FILE, SYSCTL_CONTENT, *OLD_SYSCTL_FILES))


def fix_ip_forward(transport: Transport) -> FixOutcome:
    """Set it now, then persist it; says which files changed."""
    name, done = transport.name, ()
    try:
        result = transport.run(Command(SYSCTL_NOW), timeout=30)
        if not result.ok:
            return FixOutcome(name, "ip_forward", (),
                              f"{' '.join(SYSCTL_NOW)} failed: {(result.stderr or result.stdout).strip()}")
        done = (" ".join(SYSCTL_NOW),)
        result = transport.run(persist_command(), timeout=60)
    except HostError as error:
        return FixOutcome(name, "ip_forward", done, error.message)
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        tail = (result.stderr or result.stdout).strip().splitlines()
        why = tail[-1] if tail else f"exit {result.exit_code}"
        if result.exit_code == 127:
            why = "python3 is not installed"
        return FixOutcome(name, "ip_forward", done, f"set for now, but not persisted across a reboot: {why}")
    actions, files = done + tuple(doc.get("actions", ())), tuple(doc.get("files", ()))
    if doc.get("error"):
        return FixOutcome(name, "ip_forward", actions, f"set for now; persisting it failed: {doc['error']}", files)
    return FixOutcome(name, "ip_forward", actions, files=files)
