"""A test host's own vm.swappiness, kernel.numa_balancing and CPU governors, so that doctor's tuning checks and
`--fix` run for real without touching this machine: per-host files bind-mounted, inside the host's mount
namespace only, over /proc/sys/vm/swappiness, /proc/sys/kernel/numa_balancing and a cpufreq tree under
/sys/devices/system/cpu (mounted only while a test asks for governors)."""

from __future__ import annotations

import shutil
from pathlib import Path

SYSCTLS = {"swappiness": "/proc/sys/vm/swappiness", "numa_balancing": "/proc/sys/kernel/numa_balancing"}
CPU_DIR = "/sys/devices/system/cpu"
CPU_FILES = ("online", "possible", "present")  # kept: what reads the CPU list still finds it


def set_tuning(bed, host_name: str, *, swappiness=None, numa_balancing=None, governors=None) -> None:
    """Give the host these values (a None leaves a value as it is); `governors`: one per CPU, or () for none."""
    host = bed.host(host_name)
    state = host.dir / "tuning"
    state.mkdir(exist_ok=True)
    for name, value in (("swappiness", swappiness), ("numa_balancing", numa_balancing)):
        if value is None:
            continue
        path = state / name
        path.write_text(f"{value}\n")
        if not _mounted(bed, host_name, SYSCTLS[name], path):
            bed.run_on(host_name, ["mount", "--bind", str(path), SYSCTLS[name]])
    if governors is not None:
        _set_governors(bed, host_name, state / "cpu", tuple(governors))


def read_tuning(bed, host_name: str) -> dict:
    """What the host itself reads now (through its mounts)."""
    out = {name: bed.run_on(host_name, ["cat", path]).stdout.strip() for name, path in SYSCTLS.items()}
    found = bed.run_on(host_name, ["sh", "-c", f"cat {CPU_DIR}/cpu[0-9]*/cpufreq/scaling_governor 2>/dev/null; true"])
    out["governors"] = found.stdout.split()
    return out


def _set_governors(bed, host_name: str, tree: Path, governors: tuple[str, ...]) -> None:
    if _mounted(bed, host_name, CPU_DIR, tree):
        bed.run_on(host_name, ["umount", CPU_DIR])
    shutil.rmtree(tree, ignore_errors=True)
    if not governors:
        return
    tree.mkdir(parents=True)
    for name in CPU_FILES:
        real = Path(CPU_DIR) / name
        (tree / name).write_text(real.read_text() if real.exists() else "0\n")
    for cpu, governor in enumerate(governors):
        cpufreq = tree / f"cpu{cpu}" / "cpufreq"
        cpufreq.mkdir(parents=True)
        (cpufreq / "scaling_governor").write_text(f"{governor}\n")
        (cpufreq / "scaling_available_governors").write_text("performance powersave ondemand schedutil\n")
    bed.run_on(host_name, ["mount", "--bind", str(tree), CPU_DIR])


def _mounted(bed, host_name: str, target: str, source: Path) -> bool:
    """True when `target` in the host's mount namespace is already our bind mount of `source`."""
    found = bed.run_on(host_name, ["findmnt", "--noheadings", "--output", "TARGET", "--mountpoint", target],
                       check=False)
    return found.returncode == 0 and found.stdout.strip() == target and source.exists()
