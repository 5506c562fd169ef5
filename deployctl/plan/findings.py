"""A doctor finding: one check's verdict on one host (or one NPU/GPU of it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deployctl.facts.hccn_tool import HCCN_TOOL_PATH
from deployctl.facts.model import ContainerDevices, HostFacts

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
OWNER_LABEL = "deployctl.deployment"
STATUSES = (PASS, WARN, FAIL, SKIP)

# what to install when a probe's tool is missing (exit 127)
INSTALL_FIX = {
    "npu-smi": "install the Ascend HDK driver package (it provides npu-smi) and reboot",
    "hccn_tool": f"install the Ascend HDK driver package (it provides {HCCN_TOOL_PATH})",
    "nvidia-smi": "install the NVIDIA driver (it provides nvidia-smi)",
    "sysctl": "install procps (it provides sysctl)",
    "df": "install coreutils (it provides df)",
}
DOCKER_INSTALL_PAGE = "https://docs.docker.com/engine/install/"


def docker_install_fix(facts: HostFacts) -> str:
    """How to install docker on this host: from its OS family and architecture, else docker's install page."""
    release = facts.os_release
    family = release.family if release else None
    name = (release.pretty_name or release.id) if release else None
    if family == "debian":
        command = "apt-get install -y docker.io"
    elif family == "euler" and facts.arch == "aarch64":
        command = "yum install -y docker-engine.aarch64 docker-engine-selinux.noarch docker-runc.aarch64"
    elif family == "euler":
        command = "yum install -y docker-engine"
    else:
        seen = f"{name}, " if name else ""
        return (f"install docker ({seen}see {DOCKER_INSTALL_PAGE}) and run: systemctl enable --now docker")
    return f"install docker ({name}: {command}) and run: systemctl enable --now docker"


def install_fix(tool: str, facts: HostFacts) -> str:
    if tool == "docker":
        return docker_install_fix(facts)
    return INSTALL_FIX.get(tool, f"install {tool}")


@dataclass(frozen=True)
class Finding:
    """One row of `deployctl doctor`; every FAIL carries a one-line `fix`."""

    name: str
    status: str  # PASS | WARN | FAIL | SKIP
    observed: str
    expected: str
    fix: Optional[str]
    npu: Optional[int] = None
    gpu: Optional[int] = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    def to_json(self) -> dict:
        """The contract's shape: name, status, observed, expected, fix (+ npu / gpu when about one)."""
        out = {"name": self.name, "status": self.status, "observed": self.observed,
               "expected": self.expected, "fix": self.fix}
        if self.npu is not None:
            out["npu"] = self.npu
        if self.gpu is not None:
            out["gpu"] = self.gpu
        return out


def unknown(name: str, facts: HostFacts, key: str, tool: str, expected: str, **where) -> Finding:
    """A FAIL for a fact that is missing: the tool is not installed, or it failed, or nobody asked."""
    if tool in facts.missing_tools:
        return Finding(name, FAIL, f"{tool} not found on the host", expected, install_fix(tool, facts), **where)
    error = facts.probe_error(key)
    if error:
        return Finding(name, FAIL, f"{tool} failed: {error}", expected, f"run the probe by hand on the host and fix what it reports ({tool})", **where)
    return Finding(name, FAIL, "unknown (not gathered)", expected, "rerun deployctl doctor; the probe's result is missing", **where)


def owned_by(container: ContainerDevices, deployment: Optional[str]) -> bool:
    """True when the container carries `deployctl.deployment=<deployment>` (ours: it may hold our devices)."""
    return deployment is not None and container.label(OWNER_LABEL) == deployment


def describe_holder(container: ContainerDevices) -> str:
    owner = container.label(OWNER_LABEL)
    return f"container {container.name}" + (f" of deployment {owner}" if owner else " (not deployctl's)")
