"""Parsers for nvidia-smi: the `--query-gpu` / `--query-compute-apps` CSV forms (preferred), `-L`, and
the default table (its layout changes between driver branches; read it only when nothing else works)."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from deployctl.errors import FactParseError
from deployctl.facts.model import GpuInfo, GpuListEntry, GpuProcess, GpuTableProcess, GpuTableRow, NvidiaSmiTable
from deployctl.facts.text import first_line, numbered_lines, to_int

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


_LIST = re.compile(r"^GPU (\d+): (.+) \(UUID: (\S+)\)$")


def parse_nvidia_smi_list(text: str) -> tuple[GpuListEntry, ...]:
    """`nvidia-smi -L`: `GPU 0: <name> (UUID: GPU-...)` per GPU."""
    _raise_on_error(text, "nvidia-smi -L")
    out = []
    for number, line in numbered_lines(text):
        match = _LIST.match(line.strip())
        if not match:
            raise FactParseError("nvidia-smi -L", number, line, "'GPU <n>: <name> (UUID: <uuid>)'")
        out.append(GpuListEntry(int(match.group(1)), match.group(2), match.group(3)))
    return tuple(out)


_TABLE_TITLE = re.compile(r"Driver Version:\s+(\S+)(?:\s+CUDA Version:\s+(\S+))?")
_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+(\S+)\s+\S+\s+\|")
_MEM_ROW = re.compile(r"\|\s+(\d+)MiB\s+/\s+(\d+)MiB\s+\|\s+(\d+|N/A)%?\s+(\S+)\s+\|")
_PROC_ROW = re.compile(r"^\|\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+\S+\s+(.+?)\s+(\d+)MiB\s+\|")


def parse_nvidia_smi_table(text: str) -> NvidiaSmiTable:
    """The default `nvidia-smi` table (R535-R580): driver/CUDA version, 3 lines per GPU, processes."""
    tool = "nvidia-smi"
    _raise_on_error(text, tool)
    lines = numbered_lines(text)
    title = next((_TABLE_TITLE.search(line) for _n, line in lines if "Driver Version" in line), None)
    if not title:
        number, line = first_line(text)
        raise FactParseError(tool, number, line, "'| NVIDIA-SMI ... Driver Version: <v> CUDA Version: <v> |'")
    gpus, processes = [], []
    for position, (number, line) in enumerate(lines):
        gpu = _GPU_ROW.match(line)
        if gpu:
            gpus.append(_table_gpu(gpu, lines, position, tool))
        process = _PROC_ROW.match(line)
        if process and "Processes" not in line:
            processes.append(GpuTableProcess(int(process.group(1)), int(process.group(2)),
                                             process.group(3), int(process.group(4))))
    return NvidiaSmiTable(title.group(1), title.group(2), tuple(gpus), tuple(processes))


def _table_gpu(gpu: re.Match, lines: list, position: int, tool: str) -> GpuTableRow:
    if position + 1 >= len(lines):
        raise FactParseError(tool, lines[position][0], lines[position][1], "the GPU's memory line")
    number, line = lines[position + 1]
    memory = _MEM_ROW.search(line)
    if not memory:
        raise FactParseError(tool, number, line, "'| ... <used>MiB / <total>MiB | <util>% <compute mode> |'")
    mig = None
    if position + 2 < len(lines) and not lines[position + 2][1].startswith("+"):
        mig = _table_cells(lines[position + 2][1])[-1] or None
    util = memory.group(3)
    return GpuTableRow(
        index=int(gpu.group(1)),
        name=gpu.group(2),
        bus_id=gpu.group(4),
        memory_used_mib=to_int(memory.group(1), tool, number, line, "memory used"),
        memory_total_mib=to_int(memory.group(2), tool, number, line, "memory total"),
        utilization_pct=None if util == "N/A" else int(util),
        compute_mode=memory.group(4),
        mig=mig,
    )


def _table_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
