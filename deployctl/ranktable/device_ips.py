"""Where an NPU's device_ip comes from: `hccn_tool -i N -ip -g`, else `address_N` of /etc/hccn.conf.

Pure: the caller runs the tool and reads the file, this decides (and words the error when neither has it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deployctl.errors import FactParseError, RanktableError
from deployctl.facts.hccn_tool import HCCN_TOOL_PATH, TOOL, parse_hccn_ip
from deployctl.facts.hccn_model import HccnConf


@dataclass(frozen=True)
class ToolAnswer:
    """What `hccn_tool -i N -ip -g` did; stdout None when the tool is not installed."""

    stdout: Optional[str]
    exit_code: int = 0
    stderr: str = ""


def hccn_ip_argv(tool: str, device_id: int) -> tuple[str, ...]:
    return (tool, "-i", str(device_id), "-ip", "-g")


def ip_from_tool(answer: ToolAnswer) -> Optional[str]:
    """The `ipaddr:` the tool printed, or None (no IP preset: empty stdout and a non-zero exit)."""
    if answer.stdout is None or answer.exit_code != 0:
        return None
    try:
        return parse_hccn_ip(answer.stdout).ipaddr
    except FactParseError:
        return None


def resolve_device_ip(device_id: int, answer: ToolAnswer, conf: Optional[HccnConf], conf_path: str,
                      *, where: str = "") -> str:
    """The NPU's device IP from the tool, else from hccn.conf; RanktableError naming the NPU otherwise."""
    found = ip_from_tool(answer) or (conf.address(device_id) if conf is not None else None)
    if found:
        return found
    command = " ".join(hccn_ip_argv(TOOL, device_id))
    if answer.stdout is None:
        tool_said = f"{TOOL} is not installed (not on PATH, not at {HCCN_TOOL_PATH})"
    else:
        detail = answer.stderr.strip().splitlines()[-1] if answer.stderr.strip() else f"exit {answer.exit_code}"
        tool_said = f"{command} printed none ({detail})" if answer.exit_code else f"{command} printed none"
    conf_said = f"{conf_path} does not exist" if conf is None else f"{conf_path} has no address_{device_id}"
    prefix = f"{where}: " if where else ""
    raise RanktableError(
        f"{prefix}NPU {device_id}: no device IP: {tool_said} and {conf_said}",
        hint=f"configure it: hccn_tool -i {device_id} -ip -s address <ip> netmask <mask>",
    )
