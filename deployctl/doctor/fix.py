"""`doctor --fix`: the safe repairs. Only ip_forward: now (sysctl -w) and after a reboot, under both
systemd-sysctl and procps `sysctl --system`, whatever other sysctl files say (sysctl_persist.py on the host)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from deployctl.doctor.report import HostChecks
from deployctl.errors import DeployctlError, HostError
from deployctl.plan.findings import FAIL
from deployctl.core import Command
from deployctl.execute.executor import StepOutcome
from deployctl.plan.model import Plan, Stage, Step
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


def plan_fix(hosts: tuple[str, ...]) -> Plan:
    """On each host: set it now, then persist it (the persist program says which files it changed)."""
    steps = tuple(Step(host, "fix", "run", "ip_forward is 0",
                       commands=(Command(SYSCTL_NOW), Command(persist_command().argv, check=False)))
                  for host in hosts)
    return Plan("doctor --fix", (Stage("fix", steps),))


def fix_outcome(outcome: StepOutcome) -> FixOutcome:
    """What one host's fix step did, from its results (pure)."""
    name, results, error = outcome.step.host, outcome.results, outcome.error
    said = error.message if isinstance(error, DeployctlError) else str(error)
    if not results:  # sysctl -w failed (a checked command) or the host could not be asked
        tail = error.stderr_tail.strip() if isinstance(error, HostError) else ""
        return FixOutcome(name, "ip_forward", (), f"{' '.join(SYSCTL_NOW)} failed: {tail}" if tail else said)
    done = (" ".join(SYSCTL_NOW),)
    if len(results) < 2:
        return FixOutcome(name, "ip_forward", done, said)
    result = results[1]
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


def fix_ip_forward_on(transports: Mapping[str, Transport]) -> list[FixOutcome]:
    """Run the fix plan on these hosts (the one executor, in parallel); one outcome per host, in order."""
    from deployctl.execute import Executor

    report = Executor(transports).execute(plan_fix(tuple(transports)))
    return [fix_outcome(o) for o in report.outcomes]


def fix_ip_forward(transport: Transport) -> FixOutcome:
    """Set it now, then persist it on one host; says which files changed."""
    return fix_ip_forward_on({transport.name: transport})[0]
