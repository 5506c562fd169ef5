"""Parsers for the Ascend files deployctl reads with `cat`: the driver's version.info and hccn.conf."""

from __future__ import annotations

import re

from deployctl.errors import FactParseError
from deployctl.facts.hccn_model import HccnConf, HccnDeviceConf
from deployctl.facts.model import DriverVersionInfo
from deployctl.facts.text import first_line, key_values, to_int

VERSION_INFO = "/usr/local/Ascend/driver/version.info"
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
