"""Parsers for `npu-smi info` and its `-l` and `-t board` forms (HDK 23.0.x-25.x, 910B).

The main table is split on `|` and whitespace, never on fixed offsets; a header this parser does not
know (A3 two-die rows, 310P, HDK 26 wide tables) is refused with a clear FactParseError."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from deployctl.errors import FactParseError
from deployctl.facts.npu_model import NpuBoard, NpuChip, NpuCount, NpuProcess, NpuSmiInfo
from deployctl.facts.text import first_line, key_values, numbered_lines, to_int

INFO = "npu-smi info"
_TITLE = re.compile(r"npu-smi\s+(\S+)\s+Version:\s+(\S+)")
_DCMI = re.compile(r"dcmi mod\w+ initiali[sz]e\w* failed.*?(?:ret is (-?\d+))?\s*$")
_HEADER_1 = (("NPU", "Name"), ("Health",), ("Power(W)", "Temp(C)", "Hugepages-Usage(page)"))
_HEADER_2 = (("Chip",), ("Bus-Id",), ("AICore(%)", "Memory-Usage(MB)", "HBM-Usage(MB)"))
_PROC_HEADER = (("NPU", "Chip"), ("Process", "id"), ("Process", "name"), ("Process", "memory(MB)"))
_NO_PROCESS = re.compile(r"No running processes found in NPU (\d+)")
_EXPECTED_LAYOUT = "the 910B single-die table (NPU Name | Health | Power Temp Hugepages; Chip | Bus-Id | AICore Memory HBM)"


def _cells(line: str) -> list[str]:
    """The cells between the `|` of a table row, stripped."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _words(line: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(cell.split()) for cell in _cells(line))


def _number(word: str, convert, line_no: int, line: str, what: str):
    """A table number; `NA` and `-` (what npu-smi prints for values it cannot read) become None."""
    if word in ("NA", "N/A", "-"):
        return None
    try:
        return convert(word)
    except ValueError:
        raise FactParseError(INFO, line_no, line, f"{what} as a number") from None


def _split_usage(cell: str) -> list[str]:
    """`56378/ 65536` and `0    / 0` both become ['56378', '/', '65536']."""
    return cell.replace("/", " / ").split()


def _chip_rows(first: tuple[int, str], second: tuple[int, str]) -> NpuChip:
    (n1, l1), (n2, l2) = first, second
    c1, c2 = _cells(l1), _cells(l2)
    if len(c1) != 3 or len(c2) != 3:
        raise FactParseError(INFO, n1 if len(c1) != 3 else n2, l1 if len(c1) != 3 else l2, "a row of 3 cells")
    head, right1, right2 = c1[0].split(), _split_usage(c1[2]), _split_usage(c2[2])
    if len(head) != 2 or len(right1) != 5 or right1[3] != "/":
        raise FactParseError(INFO, n1, l1, "'| <npu> <name> | <health> | <power> <temp> <used> / <total> |'")
    if len(right2) != 7 or right2[2] != "/" or right2[5] != "/" or not c2[0].isdigit():
        raise FactParseError(INFO, n2, l2, "'| <chip> | <bus id> | <aicore> <mem used> / <total> <hbm used> / <total> |'")
    return NpuChip(
        npu_id=to_int(head[0], INFO, n1, l1, "NPU id"),
        chip_id=int(c2[0]),
        name=head[1],
        health=c1[1],
        power_w=_number(right1[0], float, n1, l1, "power"),
        temp_c=_number(right1[1], int, n1, l1, "temperature"),
        hugepages_used_pages=_number(right1[2], int, n1, l1, "hugepages used"),
        hugepages_total_pages=_number(right1[4], int, n1, l1, "hugepages total"),
        bus_id=c2[1],
        aicore_pct=_number(right2[0], int, n2, l2, "AICore"),
        memory_used_mb=_number(right2[1], int, n2, l2, "memory used"),
        memory_total_mb=_number(right2[3], int, n2, l2, "memory total"),
        hbm_used_mb=_number(right2[4], int, n2, l2, "HBM used"),
        hbm_total_mb=_number(right2[6], int, n2, l2, "HBM total"),
    )


def _process_row(line_no: int, line: str) -> tuple[int, Optional[NpuProcess]]:
    """(npu id, process) for a process row, (npu id, None) for `No running processes found in NPU N`."""
    idle = _NO_PROCESS.search(line)
    if idle:
        return int(idle.group(1)), None
    cells = _cells(line)
    if len(cells) != 4 or len(cells[0].split()) != 2:
        raise FactParseError(INFO, line_no, line, "'| <npu> <chip> | <pid> | <name> | <memory MB> |'")
    return to_int(cells[0].split()[0], INFO, line_no, line, "NPU id"), NpuProcess(
        pid=to_int(cells[1], INFO, line_no, line, "process id"),
        name=cells[2],
        memory_mb=to_int(cells[3], INFO, line_no, line, "process memory"),
    )


def _dcmi_failure(lines: list[tuple[int, str]]) -> Optional[NpuSmiInfo]:
    for _number, line in lines:
        match = _DCMI.search(line)
        if match:
            error = line.strip().split(".")[0]
            return NpuSmiInfo(None, None, error=error, dcmi_ret=int(match.group(1)) if match.group(1) else None)
    return None


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """`npu-smi info`: driver version, chips with health/HBM, processes per NPU.

    The dcmi initialisation failure (driver unusable, NPU held elsewhere, no reboot after an upgrade)
    is returned as `NpuSmiInfo(error=..., dcmi_ret=...)` with no chips; anything else unexpected raises."""
    lines = numbered_lines(text)
    failure = _dcmi_failure(lines)
    if failure:
        return failure
    warning = None
    if lines and lines[-1][1].startswith("[WARNING]"):
        warning = lines.pop()[1]
    if not lines:
        raise FactParseError(INFO, 1, "", "the npu-smi info table")
    rows = iter(lines)
    title = _title(rows)
    chips = _chip_section(rows)
    processes = _process_section(rows, {chip.npu_id for chip in chips})
    chips = tuple(_with_processes(chip, processes) for chip in chips)
    return NpuSmiInfo(npu_smi_version=title[0], driver_version=title[1], chips=chips, trailing_warning=warning)


def _next(rows, expected: str) -> tuple[int, str]:
    try:
        return next(rows)
    except StopIteration:
        raise FactParseError(INFO, 0, "<end of output>", expected) from None


def _is_border(line: str) -> bool:
    return line.startswith("+") and set(line) <= set("+-=")


def _title(rows) -> tuple[str, str]:
    number, line = _next(rows, "the table's top border")
    if not _is_border(line):
        raise FactParseError(INFO, number, line, "the table's top border '+----...'")
    number, line = _next(rows, "the title '| npu-smi <v> Version: <v> |'")
    title = _TITLE.search(line)
    if not title:
        raise FactParseError(INFO, number, line, "'| npu-smi <version> Version: <driver version> |'")
    return title.group(1), title.group(2)


def _expect_header(rows, header: tuple, what: str) -> None:
    number, line = _next(rows, what)
    while _is_border(line):
        number, line = _next(rows, what)
    if _words(line) != header:
        raise FactParseError(INFO, number, line, what)


def _chip_section(rows) -> list[NpuChip]:
    _expect_header(rows, _HEADER_1, _EXPECTED_LAYOUT)
    _expect_header(rows, _HEADER_2, _EXPECTED_LAYOUT)
    number, line = _next(rows, "the '+====' line under the header")
    if not line.startswith("+="):
        raise FactParseError(INFO, number, line, "the '+====' line under the header")
    chips: list[NpuChip] = []
    while True:
        first = _next(rows, "an NPU row or the process table")
        if _is_border(first[1]):
            if not chips:
                raise FactParseError(INFO, first[0], first[1], "at least one NPU row")
            return chips
        second = _next(rows, "the NPU's second row (Chip | Bus-Id | ...)")
        chips.append(_chip_rows(first, second))
        closing = _next(rows, "the '+====' line after an NPU")
        if not closing[1].startswith("+="):
            raise FactParseError(INFO, closing[0], closing[1], "the '+====' line after an NPU")


def _process_section(rows, npu_ids: set[int]) -> dict[int, list[NpuProcess]]:
    _expect_header(rows, _PROC_HEADER, "the process table header '| NPU Chip | Process id | ... |'")
    found: dict[int, list[NpuProcess]] = {}
    for number, line in rows:
        if _is_border(line):
            continue
        npu_id, process = _process_row(number, line)
        found.setdefault(npu_id, [])
        if process:
            found[npu_id].append(process)
    missing = sorted(npu_ids - found.keys())
    if missing:
        # every NPU gets rows or "No running processes found"; a missing one means the output was cut
        raise FactParseError(INFO, 0, "<end of output>", f"the process rows of NPU {missing[0]} (truncated output?)")
    return found


def _with_processes(chip: NpuChip, processes: dict[int, list[NpuProcess]]) -> NpuChip:
    return replace(chip, processes=tuple(processes.get(chip.npu_id, ())))


# --- the `Key : value` forms ---------------------------------------------------------------


def _fields(text: str, tool: str) -> dict[str, tuple[int, str]]:
    return {key: (number, value) for number, key, value in key_values(text, tool, separator=" : ")}


def _field(fields: dict, key: str, tool: str, text: str) -> tuple[int, str]:
    if key not in fields:
        number, line = first_line(text)
        raise FactParseError(tool, number, line, f"'{key} : <value>'")
    return fields[key]


def _int_field(fields: dict, key: str, tool: str, text: str) -> int:
    number, value = _field(fields, key, tool, text)
    return to_int(value, tool, number, f"{key} : {value}", key)


def _optional_int(fields: dict, key: str, tool: str) -> Optional[int]:
    if key not in fields or fields[key][1] in ("NA", "-"):
        return None
    number, value = fields[key]
    return to_int(value, tool, number, f"{key} : {value}", key)


def parse_npu_smi_count(text: str) -> NpuCount:
    """`npu-smi info -l`: `Total Count`, then `NPU ID` / `Chip Count` per card."""
    tool = "npu-smi info -l"
    total, ids, chips = None, [], []
    for number, key, value in key_values(text, tool, separator=" : "):
        line = f"{key} : {value}"
        if key == "Total Count":
            total = to_int(value, tool, number, line, key)
        elif key == "NPU ID":
            ids.append(to_int(value, tool, number, line, key))
        elif key == "Chip Count":
            chips.append(to_int(value, tool, number, line, key))
    if total is None:
        number, line = first_line(text)
        raise FactParseError(tool, number, line, "'Total Count : <n>'")
    if len(ids) != total or len(chips) != len(ids):
        number, line = numbered_lines(text)[-1]
        raise FactParseError(tool, number, line, f"{total} 'NPU ID' / 'Chip Count' pairs (truncated output?)")
    return NpuCount(total_count=total, npu_ids=tuple(ids), chip_counts=tuple(chips))


def parse_npu_smi_board(text: str) -> NpuBoard:
    """`npu-smi info -t board -i N`; `Invalid card id.` (a card that does not exist) raises."""
    tool = "npu-smi info -t board"
    number, line = first_line(text)
    if line.strip().startswith("Invalid card id"):
        raise FactParseError(tool, number, line.strip(), "board fields (the card id does not exist)")
    fields = _fields(text, tool)
    return NpuBoard(
        npu_id=_int_field(fields, "NPU ID", tool, text),
        software_version=_field(fields, "Software Version", tool, text)[1],
        firmware_version=_field(fields, "Firmware Version", tool, text)[1],
        compatibility=fields.get("Compatibility", (0, None))[1],
        product_name=fields.get("Product Name", (0, None))[1],
        serial_number=fields.get("Serial Number", (0, None))[1],
        pci_device_id=fields.get("PCI Device ID", (0, None))[1],
        chip_count=_optional_int(fields, "Chip Count", tool),
    )
