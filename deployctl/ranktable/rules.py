"""The value-level rules every ranktable kind shares, and the recorder that collects violations.

Plain Python on purpose: this runs once per device, and a 1000-host file has 16000 of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (a JSON path as a tuple of keys and indexes), which rule, and what."""

    path: tuple
    rule: str
    message: str

    @property
    def json_path(self) -> str:
        """`server_group_list[1].server_list[0].device[1].rank_id`; `(root)` for the document itself."""
        return json_path(self.path)


def json_path(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(root)"


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "an object"}


def describe(value: Any) -> str:
    """`1 is an integer`: how a message names a value of the wrong type."""
    if value is None:
        return "null"
    return f"{json.dumps(value)[:60]} is {_TYPE_NAMES.get(type(value), type(value).__name__)}"


def is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() and p.isascii() and len(p) <= 3 and int(p) <= 255 for p in parts)


def is_count(text: str) -> bool:
    """A decimal id or count as the format writes them: digits only, no sign, no leading zero."""
    return text.isdigit() and text.isascii() and (text == "0" or not text.startswith("0"))


MAX_TP = 16  # the largest tensor-parallel size of one instance (A3: 16 NPUs per host)
MAX_DEVICE_ID = 1023  # with the card count unknown: no host has more NPUs than this
MAX_HOST_CARDS = 16  # the most NPUs of one Ascend host (Atlas 800T A3: 16; 910B servers: 8)


def device_id_problem(number: int, cards: Optional[int]) -> Optional[str]:
    """Why `number` is no device id of a host with `cards` NPUs, or None. `gen` and `validate` share it."""
    if cards is not None and number >= cards:
        return f"{number} is not a device id (cards: 0-{cards - 1})"
    if number > MAX_DEVICE_ID:
        return f"{number} is not a device id (no host has more than {MAX_DEVICE_ID + 1} NPUs)"
    return None


def requested_device_problem(number: int, cards: Optional[int]) -> Optional[str]:
    """`gen`'s judgement of a device asked for on this host: device_id_problem, and with the card count unknown
    (no npu-smi, no --cards) the most NPUs any Ascend host has, as files from anywhere are not judged by."""
    problem = device_id_problem(number, cards)
    if problem is None and cards is None and number >= MAX_HOST_CARDS:
        problem = (f"{number} is not a device id: this host's card count is unknown (no npu-smi, no --cards) and "
                   f"no Ascend host has more than {MAX_HOST_CARDS} NPUs (0-{MAX_HOST_CARDS - 1})")
    return problem


def tp_problem(size: int) -> Optional[str]:
    """Why an instance of `size` devices cannot be one TP group, or None."""
    if size and (size & (size - 1) or size > MAX_TP):
        return f"TP {size}: an instance has 1, 2, 4, 8 or 16 devices (its TP size, a power of two)"
    return None


def tp_mismatch(size: int, first: int, first_where: str) -> str:
    return (f"TP {size} differs from TP {first} of {first_where}; "
            "every prefill and decode instance has one tensor-parallel size")


def npu_reused(device_id: str, server_ip: str, first_where: str) -> str:
    return f"NPU {device_id} of {server_ip} already used at {first_where}"


class Recorder:
    """Collects violations; the typed getters record a violation and return None when a value is wrong."""

    def __init__(self, cards: Optional[int] = None) -> None:
        self.cards = cards
        self.violations: list[Violation] = []

    def add(self, path: tuple, rule: str, message: str) -> None:
        self.violations.append(Violation(path, rule, message))

    def string(self, obj: dict, key: str, path: tuple) -> Optional[str]:
        """obj[key] when it is a string; a `required` or `string` violation otherwise."""
        value = obj.get(key)
        if type(value) is str:
            return value
        if key not in obj:
            self.add(path + (key,), "required", f"missing key {key!r}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self.add(path + (key,), "string", f'{describe(value)}, expected "{value}"')
        else:
            self.add(path + (key,), "string", f"{describe(value)}, expected a string")
        return None

    def expect(self, obj: dict, key: str, path: tuple, wanted: str, rule: str) -> None:
        value = self.string(obj, key, path)
        if value is not None and value != wanted:
            self.add(path + (key,), rule, f'"{value}", expected "{wanted}"')

    def ipv4(self, obj: dict, key: str, path: tuple) -> Optional[str]:
        value = self.string(obj, key, path)
        if value is not None and not is_ipv4(value):
            self.add(path + (key,), "ipv4", f'"{value}" is not an IPv4 address')
            return None
        return value

    def count(self, obj: dict, key: str, path: tuple, rule: str) -> Optional[int]:
        value = self.string(obj, key, path)
        if value is not None and not is_count(value):
            self.add(path + (key,), rule, f'"{value}" is not a decimal number')
            return None
        return None if value is None else int(value)

    def items(self, obj: dict, key: str, path: tuple, *, what: str = "a list") -> list:
        """obj[key] when it is a list of objects; violations for the rest (those items are skipped)."""
        value = obj.get(key)
        if not isinstance(value, list):
            if key not in obj:
                self.add(path + (key,), "required", f"missing key {key!r}")
            else:
                self.add(path + (key,), "type", f"{describe(value)}, expected {what}")
            return []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                self.add(path + (key, index), "type", f"{describe(item)}, expected an object")
        return value

    def server_count(self, obj: dict, path: tuple, actual: int) -> None:
        count = self.count(obj, "server_count", path, "server_count")
        if count is not None and count != actual:
            self.add(path + ("server_count",), "server_count",
                     f'"{count}" but server_list has {actual} entr{"y" if actual == 1 else "ies"}')

    def device_id(self, device: dict, path: tuple) -> Optional[str]:
        """A device id, checked against the host's card count when it is known."""
        number = self.count(device, "device_id", path, "device_id")
        if number is None:
            return None
        problem = device_id_problem(number, self.cards)
        if problem:
            self.add(path + ("device_id",), "cards", problem)
            return None
        return device["device_id"]


class Uniques:
    """First place each value was seen, for `already used at <path>` messages."""

    def __init__(self, recorder: Recorder, rule: str) -> None:
        self.recorder, self.rule, self.seen = recorder, rule, {}

    def see(self, key: Any, path: tuple, shown: str) -> None:
        first = self.seen.setdefault(key, path)
        if first is not path:
            self.recorder.add(path, self.rule, f"{shown} already used at {json_path(first)}")

    def see_npu(self, server_ip: str, device_id: str, path: tuple) -> None:
        first = self.seen.setdefault((server_ip, device_id), path)
        if first is not path:
            self.recorder.add(path, self.rule, npu_reused(device_id, server_ip, json_path(first)))
