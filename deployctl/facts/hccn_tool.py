"""Parsers for `hccn_tool -i N ...` (the RoCE NIC of each NPU)."""

from __future__ import annotations

import re

from deployctl.errors import FactParseError
from deployctl.facts.hccn_model import HccnIp, HccnLink, HccnPing, HccnTls
from deployctl.facts.text import first_line, key_values, numbered_lines

TOOL = "hccn_tool"
# where the driver installs it; the PATH of a non-interactive SSH session often lacks this folder
HCCN_TOOL_DIR = "/usr/local/Ascend/driver/tools"
HCCN_TOOL_PATH = f"{HCCN_TOOL_DIR}/{TOOL}"


def _single(text: str, tool: str, prefix: str) -> str:
    """The value after `prefix` on the line that starts with it."""
    for _number, line in numbered_lines(text):
        if line.strip().startswith(prefix):
            value = line.strip()[len(prefix):].strip()
            if value:
                return value
    number, line = first_line(text)
    raise FactParseError(tool, number, line, f"'{prefix} <value>'")


def parse_hccn_ip(text: str) -> HccnIp:
    """`-ip -g`: `ipaddr:<ip>` and `netmask:<mask>`. Empty output (no IP preset) is a FactParseError."""
    tool = f"{TOOL} -ip -g"
    values = {key: (number, value) for number, key, value in key_values(text, tool, separator=":")}
    for key in ("ipaddr", "netmask"):
        if not values.get(key, (0, ""))[1]:
            number, line = first_line(text)
            raise FactParseError(tool, number, line, f"'{key}:<value>' (is a RoCE IP configured on this device?)")
    return HccnIp(ipaddr=values["ipaddr"][1], netmask=values["netmask"][1])


def parse_hccn_link(text: str) -> HccnLink:
    """`-link -g`: `link status: UP|DOWN`."""
    status = _single(text, f"{TOOL} -link -g", "link status:")
    if status.upper() not in ("UP", "DOWN"):
        number, line = first_line(text)
        raise FactParseError(f"{TOOL} -link -g", number, line, "'link status: UP' or 'DOWN'")
    return HccnLink(status=status)


_TLS_SWITCH = re.compile(r"tls switch\[(\d)\]")
_TLS_PRESET = re.compile(r"tls preconfigured\[(\d)\]")
_TLS_ALARM = re.compile(r"alarm time threshold\[(\d+)\]")
_DEV_ID = re.compile(r"dev_id:\s*(\d+)")


def parse_hccn_tls(text: str) -> HccnTls:
    """`-tls -g`: the line holding `tls switch[0|1]` (other lines, e.g. certificate details, are ignored)."""
    for _number, line in numbered_lines(text):
        switch = _TLS_SWITCH.search(line)
        if switch:
            preset, alarm, dev = _TLS_PRESET.search(line), _TLS_ALARM.search(line), _DEV_ID.search(line)
            return HccnTls(
                device_id=int(dev.group(1)) if dev else None,
                enabled=switch.group(1) == "1",
                preconfigured=(preset.group(1) == "1") if preset else None,
                alarm_days=int(alarm.group(1)) if alarm else None,
            )
    number, line = first_line(text)
    raise FactParseError(f"{TOOL} -tls -g", number, line, "a line with 'tls switch[0|1]'")


_PING_HEAD = re.compile(r"^device\s+(\d+)\s+PING\s+(\S+)")
_PING_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received, ([\d.]+)% packet loss")


def parse_hccn_ping(text: str) -> HccnPing:
    """`-ping -g address A`: `device N PING A` ... `3 packets transmitted, 3 received, 0.00% packet loss`."""
    tool = f"{TOOL} -ping -g"
    device_id, target = None, None
    for _number, line in numbered_lines(text):
        head = _PING_HEAD.match(line.strip())
        if head:
            device_id, target = int(head.group(1)), head.group(2)
        summary = _PING_SUMMARY.search(line)
        if summary and target is not None:
            return HccnPing(
                device_id=device_id,
                target=target,
                transmitted=int(summary.group(1)),
                received=int(summary.group(2)),
                loss_pct=float(summary.group(3)),
            )
    number, line = first_line(text)
    raise FactParseError(tool, number, line, "'device N PING A' then 'K packets transmitted, K received, ...'")


def device_ip_probes(devices: tuple[int, ...]) -> tuple:
    """Each NPU's RoCE address (`hccn_tool -i N -ip -g`) and /etc/hccn.conf, its fallback; the tool by name:
    one on PATH first, else the driver's directory (the batch appends it to PATH)."""
    from deployctl.facts.files import HCCN_CONF, parse_hccn_conf
    from deployctl.facts.probe import Probe

    return (Probe(("cat", HCCN_CONF), parse_hccn_conf, "hccn_conf"),
            *(Probe((TOOL, "-i", str(d), "-ip", "-g"), parse_hccn_ip, f"hccn_ip:{d}") for d in devices))
