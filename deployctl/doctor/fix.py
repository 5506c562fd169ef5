"""`doctor --fix`: the safe repairs, each now and after a reboot. ip_forward, and for vllm-ascend hosts
vm.swappiness and kernel.numa_balancing: sysctl -w, then a sysctl.d file that wins under both systemd-sysctl and
procps `sysctl --system`, whatever other sysctl files say (sysctl_persist.py on the host); the CPU governor:
written now, and a oneshot unit enabled for every boot."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from deployctl.doctor.report import HostChecks
from deployctl.errors import DeployctlError, HostError
from deployctl.plan.findings import FAIL
from deployctl.core import Command
from deployctl.execute.executor import StepOutcome
from deployctl.plan.model import Plan, PutFile, Stage, Step
from deployctl.redaction import redact
from deployctl.transport import Transport

# "zz-" sorts after every numbered file, Debian's 99-sysctl.conf (a link to /etc/sysctl.conf) included.
SYSCTL_FILE = "/etc/sysctl.d/zz-deployctl.conf"
OLD_SYSCTL_FILES = ("/etc/sysctl.d/99-deployctl.conf",)  # earlier releases' name: it lost to 99-sysctl.conf
SYSCTL_CONTENT = "# written by deployctl doctor --fix: vLLM/HCCL serving needs forwarding\nnet.ipv4.ip_forward = 1\n"
SYSCTL_NOW = ("sysctl", "-w", "net.ipv4.ip_forward=1")
# vllm-ascend's host tuning: its own file beside ours, so neither fix undoes the other's settings
TUNING_FILE = "/etc/sysctl.d/zz-deployctl-tuning.conf"
TUNING_HEADER = "# written by deployctl doctor --fix: vllm-ascend serving tuning\n"
TUNING_SYSCTLS = {"swappiness": "vm.swappiness", "numa_balancing": "kernel.numa_balancing"}
SET_GOVERNOR = ('for g in /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor; do '
                'echo performance > "$g" || exit 1; done')
# A governor is no sysctl: a oneshot unit sets it at every boot, enabled as `systemctl enable` would (the
# wants link), which needs no running systemd to write.
GOVERNOR_UNIT = "/etc/systemd/system/deployctl-cpu-governor.service"
GOVERNOR_WANTS = "/etc/systemd/system/multi-user.target.wants/deployctl-cpu-governor.service"
GOVERNOR_SERVICE = f"""[Unit]
Description=CPU frequency governor performance for vLLM serving (written by deployctl doctor --fix)

[Service]
Type=oneshot
ExecStart=/bin/sh -c '{SET_GOVERNOR.replace("'", "")}'

[Install]
WantedBy=multi-user.target
"""


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


def repairs_for(reports: tuple[HostChecks, ...]) -> dict[str, tuple[str, ...]]:
    """What `--fix` repairs on each host: ip_forward where it is 0, and vllm-ascend's host tuning WARNs."""
    from deployctl.doctor.checks_tuning import tuning_to_fix

    broken = set(hosts_to_fix(reports))
    repairs = {}
    for report in reports:
        names = (("ip_forward",) if report.host in broken else ()) + tuning_to_fix(report.findings)
        if names:
            repairs[report.host] = names
    return repairs


@lru_cache(maxsize=1)
def persist_program() -> str:
    return (Path(__file__).parent / "sysctl_persist.py").read_text()


def persist_command(path: str = SYSCTL_FILE, content: str = SYSCTL_CONTENT,
                    old: tuple[str, ...] = OLD_SYSCTL_FILES) -> Command:
    """The host program that makes our file's settings the values both loaders end with; idempotent."""
    return Command(("python3", "-c", persist_program(), path, content, *old))


def plan_fix(repairs: Mapping[str, tuple[str, ...]]) -> tuple[Plan, tuple[str, ...]]:
    """One step per repair and host (set it now, then make it survive a reboot), and each step's check name."""
    steps, names = [], []
    for host, wanted in repairs.items():
        if "ip_forward" in wanted:
            steps.append(Step(host, "fix", "run", "ip_forward is 0",
                              commands=(Command(SYSCTL_NOW), Command(persist_command().argv, check=False))))
            names.append("ip_forward")
        keys = tuple(TUNING_SYSCTLS[n] for n in wanted if n in TUNING_SYSCTLS)
        if keys:
            content = TUNING_HEADER + "".join(f"{key} = 0\n" for key in keys)
            steps.append(Step(host, "fix", "run", f"{', '.join(keys)} not 0", commands=(
                Command(("sysctl", "-w", *(f"{key}=0" for key in keys))),
                Command(persist_command(TUNING_FILE, content, ()).argv, check=False))))
            names.append(", ".join(n for n in wanted if n in TUNING_SYSCTLS))
        if "cpu_governor" in wanted:
            steps.append(Step(host, "fix", "run", "CPU governor not performance", commands=(
                Command(("sh", "-c", SET_GOVERNOR)),
                Command(("mkdir", "-p", GOVERNOR_WANTS.rsplit("/", 1)[0])),
                Command(("ln", "-sf", GOVERNOR_UNIT, GOVERNOR_WANTS))),
                puts=(PutFile(GOVERNOR_UNIT, GOVERNOR_SERVICE, 0o644),)))
            names.append("cpu_governor")
    return Plan("doctor --fix", (Stage("fix", tuple(steps)),)), tuple(names)


def fix_outcome(outcome: StepOutcome, check: str = "ip_forward") -> FixOutcome:
    """What one host's fix step did, from its results (pure); its error quotes the host's words, redacted."""
    found = _fix_outcome(outcome, check)
    return replace(found, error=redact(found.error)) if found.error else found


def _fix_outcome(outcome: StepOutcome, check: str) -> FixOutcome:
    name, results, error = outcome.step.host, outcome.results, outcome.error
    said = error.message if isinstance(error, DeployctlError) else str(error)
    now = " ".join(outcome.step.commands[0].argv) if outcome.step.commands else ""
    if check == "cpu_governor":
        if outcome.status != "done":
            tail = error.stderr_tail.strip() if isinstance(error, HostError) else ""
            return FixOutcome(name, check, (), f"{said}: {tail}" if tail else said)
        return FixOutcome(name, check, ("set performance on every CPU", f"wrote {GOVERNOR_UNIT}, enabled at boot "
                                        f"({GOVERNOR_WANTS})"), files=(GOVERNOR_UNIT, GOVERNOR_WANTS))
    if not results:  # sysctl -w failed (a checked command) or the host could not be asked
        tail = error.stderr_tail.strip() if isinstance(error, HostError) else ""
        return FixOutcome(name, check, (), f"{now} failed: {tail}" if tail else said)
    done = (now,)
    if len(results) < 2:
        return FixOutcome(name, check, done, said)
    result = results[1]
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        tail = (result.stderr or result.stdout).strip().splitlines()
        why = tail[-1] if tail else f"exit {result.exit_code}"
        if result.exit_code == 127:
            why = "python3 is not installed"
        return FixOutcome(name, check, done, f"set for now, but not persisted across a reboot: {why}")
    actions, files = done + tuple(doc.get("actions", ())), tuple(doc.get("files", ()))
    if doc.get("error"):
        return FixOutcome(name, check, actions, f"set for now; persisting it failed: {doc['error']}", files)
    return FixOutcome(name, check, actions, files=files)


def run_fixes(transports: Mapping[str, Transport], repairs: Mapping[str, tuple[str, ...]]) -> list[FixOutcome]:
    """Run the fix plan (the one executor, every host in parallel); one outcome per repair, in plan order."""
    from deployctl.execute import Executor

    plan, names = plan_fix(repairs)
    report = Executor(transports).execute(plan)
    return [fix_outcome(o, check) for o, check in zip(report.outcomes, names)]


def fix_ip_forward(transport: Transport) -> FixOutcome:
    """Set it now, then persist it on one host; says which files changed."""
    return run_fixes({transport.name: transport}, {transport.name: ("ip_forward",)})[0]
