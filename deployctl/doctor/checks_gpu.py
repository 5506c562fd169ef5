"""Doctor rules for NVIDIA GPU hosts (`platform: gpu`): count, memory, driver minimum, runtime, free GPUs."""

from __future__ import annotations

from typing import Optional

from deployctl.facts.model import GpuInfo, HostFacts
from deployctl.facts.versions import version_at_least
from deployctl.plan.findings import FAIL, PASS, SKIP, Finding, describe_holder, owned_by, unknown

# an "80 GB" H100 reports 81559 MiB: a GPU passes at 95% of the nominal size
MEMORY_SLACK = 0.95


def check_gpu_count(requirements, facts: HostFacts) -> Finding:
    expected = f">= {requirements.cards} GPUs"
    if facts.gpus is None:
        return unknown("gpu_count", facts, "gpus", "nvidia-smi", expected)
    count = len(facts.gpus)
    if count >= requirements.cards:
        return Finding("gpu_count", PASS, f"{count} GPUs", expected, None)
    fix = f"use a host with {requirements.cards} GPUs or lower requirements.cards (nvidia-smi -L lists them)"
    return Finding("gpu_count", FAIL, f"{count} GPUs", expected, fix)


def _chosen(facts: HostFacts, devices_used: tuple[int, ...]) -> tuple[GpuInfo, ...]:
    gpus = facts.gpus or ()
    return tuple(g for g in gpus if g.index in devices_used) if devices_used else gpus


def check_gpu_memory(requirements, facts: HostFacts, devices_used: tuple[int, ...] = ()) -> tuple[Finding, ...]:
    """memory.total >= 0.95 x gpu_memory_gb x 1024 MiB on every GPU the spec uses (all when none given)."""
    wanted = requirements.gpu_memory_gb
    if wanted is None:
        return (Finding("gpu_memory", SKIP, "not checked", "not pinned (requirements.gpu_memory_gb)", None),)
    floor = MEMORY_SLACK * wanted * 1024
    expected = f">= {floor:.0f} MiB ({wanted} GB class)"
    if facts.gpus is None:
        return (unknown("gpu_memory", facts, "gpus", "nvidia-smi", expected),)
    small = [g for g in _chosen(facts, devices_used) if g.memory_total_mib is None or g.memory_total_mib < floor]
    if not small:
        totals = ", ".join(sorted({f"{g.memory_total_mib} MiB" for g in _chosen(facts, devices_used)}))
        return (Finding("gpu_memory", PASS, totals or "no GPU", expected, None),)
    fix = "set requirements.gpu_memory_gb to the GPUs' class or use larger GPUs"
    return tuple(Finding("gpu_memory", FAIL, f"GPU {g.index}: {g.memory_total_mib} MiB", expected, fix, gpu=g.index)
                 for g in small)


def check_gpu_driver(requirements, facts: HostFacts) -> Finding:
    """GPU: the driver is at least the required version (dotted numeric comparison)."""
    required = requirements.driver
    expected = f">= {required}" if required else "not pinned (requirements.driver)"
    found = next((g.driver_version for g in facts.gpus or () if g.driver_version), None)
    if found is None:
        return Finding("driver", SKIP, "unknown", expected, None) if required is None else unknown(
            "driver", facts, "gpus", "nvidia-smi", expected)
    if required is None:
        return Finding("driver", SKIP, found, expected, None)
    if version_at_least(found, required):
        return Finding("driver", PASS, found, expected, None)
    return Finding("driver", FAIL, found, expected, f"install NVIDIA driver {required} or newer, then reboot")


def check_nvidia_runtime(facts: HostFacts) -> Finding:
    expected = "docker info lists an nvidia runtime"
    if facts.docker_info is None:
        return unknown("nvidia_runtime", facts, "docker_info", "docker", expected)
    runtimes = ", ".join(facts.docker_info.runtimes) or "none"
    if "nvidia" in facts.docker_info.runtimes:
        return Finding("nvidia_runtime", PASS, runtimes, expected, None)
    fix = "install nvidia-container-toolkit, then: nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"
    return Finding("nvidia_runtime", FAIL, runtimes, expected, fix)


def _holds(container, gpu: GpuInfo) -> bool:
    return bool({"all", str(gpu.index), gpu.uuid} & set(container.gpu_ids))


def _gpu_problem(facts: HostFacts, gpu: GpuInfo, own_deployment: Optional[str]) -> Optional[tuple[str, str]]:
    running = [c for c in facts.containers or () if c.running and _holds(c, gpu)]
    foreign = [c for c in running if not owned_by(c, own_deployment)]
    if foreign:
        return (f"GPU {gpu.index} held by {describe_holder(foreign[0])}",
                f"stop that container (docker stop {foreign[0].name}) or give the instance other GPUs")
    if running:
        return None  # our own container: its processes are expected
    apps = [p for p in facts.gpu_processes or () if p.gpu_uuid is not None and p.gpu_uuid == gpu.uuid]
    if apps:
        return (f"GPU {gpu.index} used by pid {apps[0].pid} ({apps[0].process_name}, {apps[0].used_memory_mib} MiB)",
                f"stop pid {apps[0].pid} (or the container running it) or give the instance other GPUs")
    return None


def check_gpu_free(facts: HostFacts, devices_used: tuple[int, ...], own_deployment: Optional[str]) -> tuple[Finding, ...]:
    """A GPU the spec uses runs no process, unless this deployment's own container holds it."""
    expected = "free, or held by this deployment"
    if not devices_used:
        return (Finding("gpu_free", SKIP, "no devices requested", expected, None),)
    if facts.gpus is None:
        return (unknown("gpu_free", facts, "gpus", "nvidia-smi", expected),)
    by_index = {g.index: g for g in facts.gpus}
    findings = []
    for index in devices_used:
        gpu = by_index.get(index)
        problem = (f"GPU {index} is not visible", "choose GPUs the host shows (nvidia-smi -L)") if gpu is None \
            else _gpu_problem(facts, gpu, own_deployment)
        if problem:
            findings.append(Finding("gpu_free", FAIL, problem[0], expected, problem[1], gpu=index))
    listed = ",".join(map(str, devices_used))
    return tuple(findings) or (Finding("gpu_free", PASS, f"GPU {listed} free", expected, None),)
