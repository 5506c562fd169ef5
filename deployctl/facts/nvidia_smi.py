"""Parsers for nvidia-smi's `--query-gpu` / `--query-compute-apps` CSV forms (the default table's layout
changes between driver branches; deployctl never reads it)."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from deployctl.errors import FactParseError
from deployctl.facts.model import GpuInfo, GpuProcess
from deployctl.facts.text import first_line, numbered_lines

# nvidia-smi answers an error with one line on stdout and a non-zero exit; the parsers name it
_ERRORS = (re.compile(r"^No devices were found"), re.compile(r"is not a valid field to query"),
           re.compile(r"^NVIDIA-SMI has failed"), re.compile(r"^Failed to initialize NVML"))

_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_.]*$")
# --query-gpu field -> (GpuInfo attribute, converter)
GPU_FIELDS = {
    "index": ("index", int),
    "name": ("name", str),
    "uuid": ("uuid", str),
    "pci.bus_id": ("pci_bus_id", str),
    "driver_version": ("driver_version", str),
    "memory.total": ("memory_total_mib", int),
    "memory.used": ("memory_used_mib", int),
    "utilization.gpu": ("utilization_gpu_pct", int),
    "temperature.gpu": ("temperature_c", int),
    "power.draw": ("power_draw_w", float),
    "compute_mode": ("compute_mode", str),
}
# --query-compute-apps field -> GpuProcess attribute; the header says used_gpu_memory for used_memory
APP_FIELDS = {
    "gpu_uuid": ("gpu_uuid", str),
    "pid": ("pid", int),
    "process_name": ("process_name", str),
    "used_memory": ("used_memory_mib", int),
    "used_gpu_memory": ("used_memory_mib", int),
}


def _raise_on_error(text: str, tool: str) -> None:
    number, line = first_line(text)
    if any(pattern.search(line) for pattern in _ERRORS):
        raise FactParseError(tool, number, line.strip(), "nvidia-smi output (it reported an error)")


def _value(raw: str, convert, tool: str, number: int, line: str):
    """`81559 MiB` / `75.21 W` / `0 %` -> number; `[N/A]` and `N/A` -> None."""
    if raw in ("[N/A]", "N/A", "[Not Supported]"):
        return None
    if convert is str:
        return raw
    word = raw.split()[0] if raw else raw
    try:
        return convert(word)
    except ValueError:
        raise FactParseError(tool, number, line, f"a number in {raw!r}") from None


def _csv(text: str, tool: str, fields: Optional[Sequence[str]], table: dict, required: str = "") -> list[dict]:
    _raise_on_error(text, tool)
    lines = numbered_lines(text)
    if fields is None:
        if not lines:
            raise FactParseError(tool, 1, "", "the CSV header line")
        fields = [name.split(" [")[0].strip() for name in lines[0][1].split(", ")]
        if not all(_FIELD_NAME.match(name) for name in fields):
            raise FactParseError(tool, lines[0][0], lines[0][1], "a CSV header of field names ('index, name, ...')")
        lines = lines[1:]
    if required and required not in fields:
        number, line = first_line(text)
        raise FactParseError(tool, number, line, f"a '{required}' column")
    rows = []
    for number, line in lines:
        cells = line.split(", ")
        if len(cells) != len(fields):
            raise FactParseError(tool, number, line, f"{len(fields)} values separated by ', '")
        row = {}
        for name, raw in zip(fields, cells):
            if name in table:
                attribute, convert = table[name]
                row[attribute] = _value(raw.strip(), convert, tool, number, line)
        if required and row[table[required][0]] is None:
            raise FactParseError(tool, number, line, f"a value for '{required}'")
        rows.append(row)
    return rows


def parse_nvidia_smi_query_gpu(text: str, fields: Optional[Sequence[str]] = None) -> tuple[GpuInfo, ...]:
    """`--query-gpu=... --format=csv[,noheader][,nounits]`; pass `fields` (the query) for noheader."""
    return tuple(GpuInfo(**row) for row in _csv(text, "nvidia-smi --query-gpu", fields, GPU_FIELDS))


def parse_nvidia_smi_compute_apps(text: str, fields: Optional[Sequence[str]] = None) -> tuple[GpuProcess, ...]:
    """`--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv`; a bare header = none."""
    rows = _csv(text, "nvidia-smi --query-compute-apps", fields, APP_FIELDS, required="pid")
    return tuple(
        GpuProcess(row.get("gpu_uuid"), row["pid"], row.get("process_name"), row.get("used_memory_mib"))
        for row in rows
    )
