"""Parsers for the Ascend files deployctl reads with `cat`: version.info, ascend_install.info,
hccn.conf and the CANN toolkit's install info / version.cfg."""

from __future__ import annotations

import re

from deployctl.errors import FactParseError
from deployctl.facts.model import (
    AscendInstallInfo,
    DriverVersionInfo,
    HccnConf,
    HccnDeviceConf,
    ToolkitInstallInfo,
    ToolkitVersionCfg,
)
from deployctl.facts.text import first_line, key_values, to_int

VERSION_INFO = "/usr/local/Ascend/driver/version.info"
ASCEND_INSTALL_INFO = "/etc/ascend_install.info"
HCCN_CONF = "/etc/hccn.conf"


def _required(values: dict[str, str], key: str, tool: str, text: str) -> str:
    if not values.get(key):
        number, line = first_line(text)
        raise FactParseError(tool, number, line, f"a '{key}=<value>' line")
    return values[key]


def parse_version_info(text: str) -> DriverVersionInfo:
    """version.info: the driver version is the key exactly `Version` (other keys end in `_version`)."""
    tool = VERSION_INFO
    values = {key: value for _n, key, value in key_values(text, tool, separator="=")}
    firmware = re.fullmatch(r"\[([^,\]]+),([^\]]+)\]", values.get("compatible_version_fw", ""))
    return DriverVersionInfo(
        version=_required(values, "Version", tool, text),
        package_version=values.get("package_version"),
        compatible_firmware_range=(firmware.group(1).strip(), firmware.group(2).strip()) if firmware else None,
    )


def parse_ascend_install_info(text: str) -> AscendInstallInfo:
    """/etc/ascend_install.info: install path, status (`complete`) and the run user."""
    values = {key: value for _n, key, value in key_values(text, ASCEND_INSTALL_INFO, separator="=")}
    if not {"Driver_Install_Path_Param", "Driver_Install_Status", "UserName"} & values.keys():
        number, line = first_line(text)
        raise FactParseError(ASCEND_INSTALL_INFO, number, line, "'Driver_Install_Status=<status>' lines")
    return AscendInstallInfo(
        driver_install_path=values.get("Driver_Install_Path_Param"),
        driver_install_status=values.get("Driver_Install_Status"),
        run_user=values.get("UserName"),
    )


_HCCN_KEY = re.compile(r"(address|netmask|netdetect|gateway|send_arp_status|tls_enable)_(\d+)")
_HCCN_INT_FIELDS = ("send_arp_status", "tls_enable")


def parse_hccn_conf(text: str) -> HccnConf:
    """/etc/hccn.conf: `<field>_<device id>=<value>` lines, grouped per physical device id.

    Keys deployctl does not use (other vendor settings) are ignored; a line without `=` is an error."""
    fields: dict[int, dict[str, object]] = {}
    for number, key, value in key_values(text, HCCN_CONF, separator="=", comment="#"):
        match = _HCCN_KEY.fullmatch(key)
        if not match:
            continue
        name, device_id = match.group(1), int(match.group(2))
        line = f"{key}={value}"
        parsed = to_int(value, HCCN_CONF, number, line, name) if name in _HCCN_INT_FIELDS else value
        fields.setdefault(device_id, {})[name] = parsed
    devices = tuple(HccnDeviceConf(device_id=device_id, **fields[device_id]) for device_id in sorted(fields))
    return HccnConf(devices=devices)


def parse_toolkit_install_info(text: str) -> ToolkitInstallInfo:
    """ascend_toolkit_install.info: `version=8.0.RC3`, `arch=aarch64`."""
    tool = "ascend_toolkit_install.info"
    values = {key: value for _n, key, value in key_values(text, tool, separator="=")}
    return ToolkitInstallInfo(cann_version=_required(values, "version", tool, text), arch=values.get("arch"))


_RUNNING = re.compile(r"(\w+)_running_version")
_RUNNING_VALUE = re.compile(r"\[([^:\]]+):([^\]]+)\]")


def parse_toolkit_version_cfg(text: str) -> ToolkitVersionCfg:
    """CANN version.cfg: `<component>_running_version=[<inner>:<CANN>]`; the first line is a comment."""
    tool = "version.cfg"
    components: list[tuple[str, str]] = []
    cann: list[str] = []
    for number, key, value in key_values(text, tool, separator="=", comment="#"):
        name, parsed = _RUNNING.fullmatch(key), _RUNNING_VALUE.fullmatch(value)
        if not name:
            continue
        if not parsed:
            raise FactParseError(tool, number, f"{key}={value}", "'[<inner version>:<CANN version>]'")
        components.append((name.group(1), parsed.group(1)))
        cann.append(parsed.group(2))
    if not components:
        number, line = first_line(text)
        raise FactParseError(tool, number, line, "'<component>_running_version=[...]' lines")
    # toolkit's own entry names the CANN release; the others normally agree with it.
    by_name = dict(zip((name for name, _ in components), cann))
    return ToolkitVersionCfg(cann_version=by_name.get("toolkit", cann[0]), component_versions=tuple(components))
