"""The doctor's rules about a host's NPUs: count, health, memory, driver and firmware, and who holds them."""

from __future__ import annotations

from typing import Optional

from deployctl.facts.compat import rows_for_driver
from deployctl.facts.model import HostFacts
from deployctl.facts.npu_model import NpuBoard
from deployctl.facts.versions import same_version, version_within
from deployctl.plan.findings import FAIL, PASS, SKIP, WARN, Finding, describe_holder, owned_by, unknown
from deployctl.spec.model import Requirements

GIB = 1024**3
DCMI_FIX = ("reboot if the driver or firmware was just upgraded, else stop the container holding the NPUs "
            "(docker ps) and check the driver is installed and mounted")


def _driver_fix(required: str) -> str:
    releases = ", ".join(row.ascendcloud for row in rows_for_driver(required))
    validated = f" (AscendCloud {releases} are validated with it)" if releases else ""
    return f"install Ascend HDK driver {required}{validated}, then reboot"


def check_npu_count(requirements: Requirements, facts: HostFacts) -> Finding:
    expected = f">= {requirements.cards} NPUs"
    info = facts.npu
    if info is not None and not info.ok:
        ret = f" (ret {info.dcmi_ret})" if info.dcmi_ret is not None else ""
        return Finding("npu_count", FAIL, f"npu-smi info: {info.error}{ret}", expected, DCMI_FIX)
    count = facts.npus_counted()
    if count is None:
        return unknown("npu_count", facts, "npu_count", "npu-smi", expected)
    if count >= requirements.cards:
        return Finding("npu_count", PASS, f"{count} NPUs", expected, None)
    fix = f"use a host with {requirements.cards} NPUs or lower requirements.cards (check every card is visible: npu-smi info -l)"
    return Finding("npu_count", FAIL, f"{count} NPUs", expected, fix)


def check_npu_health(facts: HostFacts) -> tuple[Finding, ...]:
    """One PASS when every card is OK, else one FAIL per card that is not."""
    info = facts.npu
    if info is None or not info.ok:
        return (Finding("npu_health", SKIP, "npu-smi info gave no table", "health OK on every NPU", None),)
    bad = info.unhealthy
    if not bad:
        return (Finding("npu_health", PASS, f"OK on {info.card_count} NPUs", "health OK on every NPU", None),)
    return tuple(
        Finding("npu_health", FAIL, f"NPU {chip.npu_id} health {chip.health}", "OK",
                f"read the error code (npu-smi info -t health -i {chip.npu_id} -c {chip.chip_id}) and repair or "
                f"replace the card; keep NPU {chip.npu_id} out of the spec meanwhile", npu=chip.npu_id)
        for chip in bad
    )


def check_npu_memory(requirements: Requirements, facts: HostFacts) -> Finding:
    wanted = requirements.npu_memory_gb
    expected = f">= {wanted} GB HBM per NPU" if wanted else "not pinned (requirements.npu_memory_gb)"
    total = facts.npu.hbm_total_mb_per_card if facts.npu and facts.npu.ok else None
    if total is None:
        if wanted is None:
            return Finding("npu_memory", SKIP, "unknown", expected, None)
        return unknown("npu_memory", facts, "npu_info", "npu-smi", expected)
    observed = f"{round(total / 1024)} GB ({total} MB HBM per NPU)"
    if wanted is None:
        return Finding("npu_memory", SKIP, observed, expected, None)
    if round(total / 1024) >= wanted:
        return Finding("npu_memory", PASS, observed, expected, None)
    fix = f"set requirements.npu_memory_gb: {round(total / 1024)} (more cards per instance, shorter max_model_len) or use {wanted} GB cards"
    return Finding("npu_memory", FAIL, observed, expected, fix)


def _driver_sources(facts: HostFacts) -> list[tuple[str, str]]:
    """(where, version) of every driver version the host reports: loaded first, then installed files."""
    found = []
    if facts.npu and facts.npu.ok and facts.npu.driver_version:
        found.append(("npu-smi", facts.npu.driver_version))
    for board in facts.boards or ():
        found.append((f"board of NPU {board.npu_id}", board.software_version))
    if facts.driver_files:
        found.append(("version.info", facts.driver_files.version))
    return found


def check_driver(requirements: Requirements, facts: HostFacts) -> Finding:
    """Ascend: the exact version; the loaded driver (npu-smi) must also match the installed one."""
    required = requirements.driver
    expected = f"exactly {required}" if required else "not pinned (requirements.driver)"
    sources = _driver_sources(facts)
    if not sources:
        if required is None:
            return Finding("driver", SKIP, "unknown", expected, None)
        return unknown("driver", facts, "npu_info", "npu-smi", expected)
    loaded = sources[0][1]
    if any(not same_version(version, loaded) for _where, version in sources):
        observed = ", ".join(f"{where}: {version}" for where, version in sources)
        installed = facts.driver_files.version if facts.driver_files else None
        if installed and (required is None or same_version(installed, required)):
            fix = f"reboot so the installed driver {installed} is the one loaded"
        else:
            fix = _driver_fix(required) if required else "install one driver version and reboot"
        return Finding("driver", FAIL, observed, expected, fix)
    if required is None:
        return Finding("driver", SKIP, loaded, expected, None)
    if same_version(loaded, required):
        return Finding("driver", PASS, loaded, expected, None)
    return Finding("driver", FAIL, loaded, expected, _driver_fix(required))


def _firmware_range(requirements: Requirements, facts: HostFacts) -> Optional[tuple[str, str]]:
    if facts.driver_files and facts.driver_files.compatible_firmware_range:
        return facts.driver_files.compatible_firmware_range
    rows = rows_for_driver(requirements.driver) if requirements.driver else ()
    if rows and rows[0].firmware_min and rows[0].firmware_max:
        return rows[0].firmware_min, rows[0].firmware_max
    return None


def _firmware_problem(board: NpuBoard, accepted: Optional[tuple[str, str]]) -> Optional[str]:
    if board.compatibility == "NOK":
        return f"NPU {board.npu_id}: firmware {board.firmware_version} reported NOK (incompatible with the driver)"
    if accepted and not version_within(board.firmware_version, *accepted):
        return f"NPU {board.npu_id}: firmware {board.firmware_version} outside {accepted[0]}-{accepted[1]}"
    return None


def check_firmware(requirements: Requirements, facts: HostFacts) -> Finding:
    """Board `Compatibility` is not NOK and the firmware is in the range the driver accepts."""
    accepted = _firmware_range(requirements, facts)
    expected = f"compatible with the driver ({accepted[0]}-{accepted[1]})" if accepted else "compatible with the driver"
    if not facts.boards:
        if facts.npu is not None and not facts.npu.ok:
            return Finding("firmware", SKIP, "npu-smi cannot read the cards", expected, None)
        return unknown("firmware", facts, "board", "npu-smi", expected)
    problems = [p for p in (_firmware_problem(b, accepted) for b in facts.boards) if p]
    if problems:
        fix = "install the NPU firmware package of the same HDK release as the driver, then reboot"
        return Finding("firmware", FAIL, "; ".join(problems), expected, fix)
    observed = ", ".join(sorted({b.firmware_version for b in facts.boards}))
    doubtful = [b for b in facts.boards if b.compatibility not in ("OK", None)]
    if doubtful or not accepted:
        note = f" (compatibility {doubtful[0].compatibility})" if doubtful else " (no accepted range known)"
        return Finding("firmware", WARN, observed + note, expected, None)
    return Finding("firmware", PASS, observed, expected, None)


def check_npu_free(facts: HostFacts, devices_used: tuple[int, ...], own_deployment: Optional[str]) -> tuple[Finding, ...]:
    """Each NPU the spec uses is visible and held by nothing but this deployment's own containers."""
    expected = "free, or held by this deployment"
    if not devices_used:
        return (Finding("npu_free", SKIP, "no devices requested", expected, None),)
    if facts.npu is None and facts.containers is None:
        return (unknown("npu_free", facts, "npu_info", "npu-smi", expected),)
    running = [c for c in facts.containers or () if c.running]
    ours = {npu for c in running if owned_by(c, own_deployment) for npu in c.npu_ids}
    findings = []
    for npu in devices_used:
        problem = _npu_problem(facts, running, ours, npu, own_deployment)
        if problem:
            findings.append(Finding("npu_free", FAIL, problem[0], expected, problem[1], npu=npu))
    if findings:
        return tuple(findings)
    listed = ",".join(map(str, devices_used))
    return (Finding("npu_free", PASS, f"NPU {listed} free" + (" or ours" if ours else ""), expected, None),)


def _npu_problem(facts, running, ours, npu, own_deployment) -> Optional[tuple[str, str]]:
    """(observed, fix) when NPU `npu` cannot be used by this deployment, else None."""
    if facts.npu is not None and facts.npu.ok and npu not in facts.npu.npu_ids:
        return f"NPU {npu} is not visible", "choose devices the host shows (npu-smi info -l) or check the card"
    for container in running:
        if npu in container.npu_ids and not owned_by(container, own_deployment):
            return (f"NPU {npu} held by {describe_holder(container)}",
                    f"stop that container (docker stop {container.name}) or give the instance other devices")
    chip = facts.npu.chip(npu) if facts.npu is not None and facts.npu.ok else None
    if chip and chip.processes and npu not in ours:
        process = chip.processes[0]
        return (f"NPU {npu} used by pid {process.pid} ({process.name}, {process.memory_mb} MB)",
                f"stop pid {process.pid} (or the container running it) or give the instance other devices")
    return None
