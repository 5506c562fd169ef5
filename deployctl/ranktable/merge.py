"""Merge per-host global ranktables into one, as `pd_ranktable_tools.py --mode merge` does, but refusing
what would make a broken deployment (an NPU or a device IP twice, two schedulers)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from deployctl.errors import Problem, RanktableError
from deployctl.ranktable.check import GLOBAL_KINDS, check_ranktable
from deployctl.ranktable.model import (
    DECODE, GROUP_IDS, PREFILL, ROLE_OF_GROUP, SCHEDULER, Group, Ranktable, ranktable_from_document,
)

SHOWN = 10  # duplicates listed in the error; a file given twice would list every device twice


def merge_documents(documents: Sequence[tuple[str, Any]]) -> Ranktable:
    """(file name, decoded JSON) of per-host global files -> the merge; every bad input refused at once."""
    tables, problems = [], []
    for path, document in documents:
        result = check_ranktable(document)
        if result.kind not in GLOBAL_KINDS:
            problems.append(Problem((), f"a {result.kind} file, expected a per-host global ranktable", file=path))
        problems += [Problem(v.path, v.message, file=path) for v in result.problems]
        if not problems:
            tables.append(ranktable_from_document(document))
    if problems:
        raise RanktableError(f"refused: {len(problems)} problem{'s' if len(problems) != 1 else ''} in the inputs",
                             problems)
    return merge(tables, [path for path, _ in documents])


def merge(ranktables: Sequence[Ranktable], names: Optional[Sequence[str]] = None) -> Ranktable:
    """Groups 0, 1, 2 with each group's servers concatenated in input order; `names` label errors."""
    names = list(names) if names is not None else [f"input {n + 1}" for n in range(len(ranktables))]
    if not ranktables:
        raise RanktableError("nothing to merge: give the per-host global ranktables")
    refuse_duplicates(ranktables, names)
    merged = Ranktable(tuple(
        Group(group_id, tuple(s for table in ranktables for s in table.group(group_id))) for group_id in GROUP_IDS
    ))
    _refuse_incomplete(merged, ranktables, names)
    return merged


def _refuse_incomplete(merged: Ranktable, ranktables: Sequence[Ranktable], names: Sequence[str]) -> None:
    schedulers = [name for table, name in zip(ranktables, names) for _ in table.group(SCHEDULER)]
    if len(schedulers) > 1:
        raise RanktableError(
            f"two schedulers: {', '.join(schedulers)} each hold a group \"0\" server; a deployment has one",
            hint="run `ranktable gen --api-server` on one host only",
        )
    for group_id, flag in ((SCHEDULER, "--api-server"), (PREFILL, "--prefill-server-list"),
                           (DECODE, "--decode-server-list")):
        if not merged.group(group_id):
            raise RanktableError(f"no {ROLE_OF_GROUP[group_id]} in any input: group \"{group_id}\" would be empty",
                                 hint=f"add the global file of the host that ran `ranktable gen {flag}`")
    sizes = {len(s.devices or ()) for group_id in (PREFILL, DECODE) for s in merged.group(group_id)}
    if len(sizes) > 1:
        raise RanktableError(f"prefill and decode instances must share one tensor-parallel size, got {sorted(sizes)}")


def refuse_duplicates(ranktables: Sequence[Ranktable], names: Sequence[str]) -> None:
    """Raise RanktableError listing every NPU (server_ip + device_id) or device IP used twice."""
    problems: list[Problem] = []
    npu_at: dict[tuple[str, str], str] = {}
    ip_at: dict[str, str] = {}
    for table, name in zip(ranktables, names):
        for g, group in enumerate(table.groups):
            for s, server in enumerate(group.servers):
                for d, device in enumerate(server.devices or ()):
                    path = ("server_group_list", g, "server_list", s, "device", d)
                    here = f"{name} {_dotted(path)}"
                    npu = (server.server_ip, device.device_id)
                    if npu in npu_at:
                        problems.append(Problem(path + ("device_id",), file=name, message=(
                            f"NPU {device.device_id} of {server.server_ip} already used at {npu_at[npu]}")))
                    else:
                        npu_at[npu] = here
                    if device.device_ip in ip_at:
                        problems.append(Problem(path + ("device_ip",), file=name, message=(
                            f"{device.device_ip} already used at {ip_at[device.device_ip]}")))
                    else:
                        ip_at[device.device_ip] = here
    if problems:
        count = len(problems)
        first = f"; the first {SHOWN}:" if count > SHOWN else ":"
        raise RanktableError(f"refused: {count} duplicate{'s' if count != 1 else ''} (an NPU or device IP twice){first}",
                             problems[:SHOWN], hint="is one host's file given twice, or were two hosts' hccn.conf copied?")


def _dotted(path: tuple) -> str:
    return Problem(path).dotted_path
