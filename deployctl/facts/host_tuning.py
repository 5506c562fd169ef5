"""The host tuning vllm-ascend's tutorials set by hand: vm.swappiness, kernel.numa_balancing and each CPU's
frequency governor, read in one command and parsed here (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deployctl.errors import FactParseError
from deployctl.facts.probe import Probe

SWAPPINESS = "vm.swappiness"
NUMA_BALANCING = "kernel.numa_balancing"
GOVERNORS = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
# `<key> <value>` per sysctl (`-` when the kernel has no such key), then `governor <name>` per CPU with cpufreq
TUNING_SCRIPT = (
    'for k in vm/swappiness kernel/numa_balancing; do '
    'if [ -r "/proc/sys/$k" ]; then printf "%s %s\\n" "$k" "$(cat "/proc/sys/$k")"; else printf "%s -\\n" "$k"; fi; '
    'done; '
    f'for g in {GOVERNORS}; do [ -r "$g" ] && printf "governor %s\\n" "$(cat "$g")"; done; true'
)


@dataclass(frozen=True)
class HostTuning:
    """None: the kernel has no such setting; governors: one per CPU with cpufreq (empty: no cpufreq)."""

    swappiness: Optional[int]
    numa_balancing: Optional[int]
    governors: tuple[str, ...]


def parse_host_tuning(text: str) -> HostTuning:
    values: dict[str, Optional[int]] = {}
    governors = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if len(words) != 2 or (words[0] != "governor" and not (words[1] == "-" or words[1].isdigit())):
            raise FactParseError("host tuning", number, line, "'vm/swappiness N', or 'governor NAME'")
        if words[0] == "governor":
            governors.append(words[1])
        else:
            values[words[0]] = None if words[1] == "-" else int(words[1])
    if "vm/swappiness" not in values or "kernel/numa_balancing" not in values:
        raise FactParseError("host tuning", 1, text.splitlines()[0] if text.strip() else "",
                             "both vm/swappiness and kernel/numa_balancing")
    return HostTuning(values["vm/swappiness"], values["kernel/numa_balancing"], tuple(governors))


def tuning_probe() -> Probe:
    return Probe(("sh", "-c", TUNING_SCRIPT), parse_host_tuning, "tuning", tool_name="sh")
