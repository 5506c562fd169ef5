"""A host's emulated Ascend state: the profile, and the files and device nodes it implies."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat
from pathlib import Path

from tests.testbed import fakes, layout, prerender

FAKE_TOOLS = {
    "usr/local/sbin/npu-smi": "npu-smi",
    "usr/local/Ascend/driver/tools/hccn_tool": "hccn_tool",
}
EXTRA_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")

VERSION_INFO = """Version={driver}
ascendhal_version=7.35.19
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C15SPC011B224
compatible_version=[V100R001C29],[V100R001C30],[V100R001C13],[V100R001C15]
compatible_version_fw=[7.0.0,7.1.99]
package_version={driver}
"""

ASCEND_INSTALL_INFO = """UserName=HwHiAiUser
UserGroup=HwHiAiUser
Firmware_Install_Type=full
Firmware_Install_Path_Param=/usr/local/Ascend
Driver_Install_Type=full
Driver_Install_Path_Param=/usr/local/Ascend
Driver_Install_For_All=no
Driver_Install_Mode=normal
Driver_Install_Status={status}
"""


def default_profile(index: int) -> dict:
    """Host i's profile: 8 x 910B3 64 GB, driver 23.0.6, healthy, its own device IPs."""
    profile = dict(fakes.DEFAULT_PROFILE)
    profile.update(
        host=layout.host_name(index),
        device_ips=layout.device_ips(index, 8),
        calls_log=str(layout.host_dir(index) / "calls.log"),
        bed_hosts=str(layout.state_dir() / "hosts"),
    )
    return profile


def changed(profile: dict, changes: dict) -> dict:
    """The profile with changes applied; a new card count re-derives the device IPs."""
    updated = {**profile, **changes}
    if "cards" in changes and "device_ips" not in changes:
        index = int(profile["host"][len("tb"):])
        updated["device_ips"] = layout.device_ips(index, int(changes["cards"]))
    return updated


def tool_script(tool: str) -> str:
    """The fake tool's file: a sh script printing pre-rendered answers, fakes.py as its fallback."""
    return prerender.fakes_tool(tool)


def _write(root: Path, relative: str, text: str, mode: int = 0o644) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)  # atomic: a tool running at that moment reads old or new, never half


def install_tools(root: Path) -> None:
    """Put the fake npu-smi and hccn_tool at their real paths under a host's root."""
    for relative, tool in FAKE_TOOLS.items():
        _write(root, relative, tool_script(tool), 0o755)
    _write(root, "etc/profile.d/ascend-driver.sh", "export PATH=/usr/local/Ascend/driver/tools:$PATH\n")


def apply_profile(root: Path, profile: dict) -> None:
    """Write the profile and everything derived from it (files, /dev nodes) under a host's root."""
    full = fakes.with_defaults(profile)
    _write(root, fakes.PROFILE_PATH.lstrip("/"), json.dumps(full, indent=2) + "\n")
    write_outputs(root / prerender.FAKE_DIR.lstrip("/"), full)
    _write(root, "etc/hccn.conf", fakes.render_hccn_conf(full))
    _write(root, "usr/local/Ascend/driver/version.info", VERSION_INFO.format(driver=full["driver"]))
    status = "incomplete" if full["trailing_warning"] else "complete"
    _write(root, "etc/ascend_install.info", ASCEND_INSTALL_INFO.format(status=status))
    _sync_devices(root / "dev", int(full["cards"]))


_generation = itertools.count()


def write_outputs(fake_dir: Path, profile: dict) -> None:
    """Pre-render the tools' answers into out-<n>/, point the `out` link at it (atomic), drop older ones."""
    fake_dir.mkdir(parents=True, exist_ok=True)
    name = f"{prerender.OUT_LINK}-{os.getpid()}-{next(_generation)}"
    target = fake_dir / name
    for relative, text in prerender.files(profile).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    link = fake_dir / prerender.OUT_LINK
    tmp = fake_dir / (name + ".link")
    os.symlink(name, tmp)  # relative: resolves inside the host's own mount namespace
    os.replace(tmp, link)
    for old in fake_dir.glob(f"{prerender.OUT_LINK}-*"):
        if old.name != name and old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)


def _sync_devices(dev: Path, cards: int) -> None:
    # Nodes are /dev/null's (c 1 3): docker passes them into containers and they read EOF.
    wanted = {f"davinci{n}" for n in range(cards)} | set(EXTRA_DEVICES)
    for entry in os.listdir(dev):
        if entry.startswith("davinci") and entry[len("davinci"):].isdigit() and entry not in wanted:
            os.unlink(dev / entry)
    for name in sorted(wanted):
        if not (dev / name).exists():
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))


# -- GPU hosts (profile kind "gpu") ---------------------------------------------------------------
# /usr/bin is shared with the machine; /usr/local is each host's own overlay and on sshd's and dockerd's PATH.
NVIDIA_SMI = "usr/local/bin/nvidia-smi"
# dockerd registers its `--gpus` driver only when this prestart hook is on its PATH at start; the fake
# one reads the OCI state runc writes to it and exits 0, so `--gpus device=N` runs without a GPU.
NVIDIA_HOOK = "usr/local/bin/nvidia-container-runtime-hook"
NVIDIA_HOOK_SCRIPT = "#!/bin/sh\ncat > /dev/null\nexit 0\n"


def gpu_profile(profile: dict, changes: dict) -> dict:
    """A GPU host's profile: kind gpu, no NPUs, the fake nvidia-smi's keys (fake_nvidia_smi.GPU_DEFAULTS)."""
    from tests.testbed import fake_nvidia_smi

    updated = changed(profile, {"cards": 0, **changes})
    return {**fake_nvidia_smi.GPU_DEFAULTS, **updated, "kind": "gpu"}


def nvidia_smi_script() -> str:
    return prerender.nvidia_smi_tool()


def install_gpu_tools(root: Path, runtime: bool) -> None:
    _write(root, NVIDIA_SMI, nvidia_smi_script(), 0o755)
    if runtime:
        _write(root, NVIDIA_HOOK, NVIDIA_HOOK_SCRIPT, 0o755)
    elif (root / NVIDIA_HOOK).exists():
        os.unlink(root / NVIDIA_HOOK)


def remove_gpu_tools(root: Path) -> None:
    for relative in (NVIDIA_SMI, NVIDIA_HOOK):
        if (root / relative).exists():
            os.unlink(root / relative)
