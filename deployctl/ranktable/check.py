"""Judge a ranktable document: detect its kind, then check every rule of that kind with JSON paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from deployctl.ranktable.model import GROUP_IDS, ROLE_OF_GROUP
from deployctl.ranktable.rules import Recorder, Violation, json_path
from deployctl.ranktable.rules_hccl import check_hccl
from deployctl.ranktable.rules_pd import PdRules

PD_GLOBAL, PD_GLOBAL_PARTIAL, PD_LOCAL = "pd-global", "pd-global-partial", "pd-local"
HCCL_V1_0, HCCL_V1_2, UNKNOWN = "hccl-v1.0", "hccl-v1.2", "unknown"
GLOBAL_KINDS = (PD_GLOBAL, PD_GLOBAL_PARTIAL)


@dataclass(frozen=True)
class CheckResult:
    kind: str  # pd-global | pd-global-partial | pd-local | hccl-v1.0 | hccl-v1.2 | unknown
    problems: tuple[Violation, ...]

    @property
    def valid(self) -> bool:
        return not self.problems


def detect_kind(document: Any) -> str:
    """What a document claims to be, from its shape alone (its rules are judged afterwards)."""
    if not isinstance(document, dict):
        return UNKNOWN
    if "server_group_list" in document:
        groups = document["server_group_list"]
        if isinstance(groups, list) and len(groups) == 3 and all(
            isinstance(g, dict) and g.get("server_list") for g in groups
        ) and {g.get("group_id") for g in groups} == set(GROUP_IDS):
            return PD_GLOBAL
        return PD_GLOBAL_PARTIAL
    if "group_id" in document:
        return PD_LOCAL
    if "server_list" in document:
        return HCCL_V1_2 if document.get("version") == "1.2" or "super_pod_list" in document else HCCL_V1_0
    return UNKNOWN


def check_ranktable(document: Any, *, complete: bool = False, cards: Optional[int] = None) -> CheckResult:
    """Every rule of the document's kind; `complete` insists on a complete P/D global ranktable."""
    kind = detect_kind(document)
    recorder = Recorder(cards)
    if kind in GLOBAL_KINDS:
        PdRules(recorder).global_file(document, complete_kind=kind == PD_GLOBAL)
    elif kind == PD_LOCAL:
        PdRules(recorder).local_file(document)
    elif kind in (HCCL_V1_0, HCCL_V1_2):
        check_hccl(recorder, document, "1.2" if kind == HCCL_V1_2 else "1.0")
    else:
        recorder.add((), "kind", "not a ranktable: expected server_group_list (P/D global), group_id and "
                                 "server_list (P/D local) or server_list (HCCL)")
    if complete and kind != PD_GLOBAL:
        recorder.add(*_incomplete(document, kind))
    if not recorder.violations and kind != UNKNOWN:
        # the rules above are meant to cover the schema; this net catches a structure they missed
        from deployctl.ranktable.schema import schema_violations

        recorder.violations += schema_violations(document, kind)
    return CheckResult(kind, tuple(recorder.violations))


def _incomplete(document: Any, kind: str) -> tuple[tuple, str, str]:
    """Why a document is not what `up` starts with: the path, rule and message of `--complete`."""
    if kind != PD_GLOBAL_PARTIAL:
        return (), "complete", f"a {kind} file, expected a complete P/D global ranktable"
    groups = document.get("server_group_list")
    present = {g.get("group_id"): g for g in groups if isinstance(g, dict)} if isinstance(groups, list) else {}
    for group_id in GROUP_IDS:
        if not present.get(group_id, {}).get("server_list"):
            state = "empty" if group_id in present else "missing"
            return ("server_group_list",), "complete", (
                f'not complete: group "{group_id}" ({ROLE_OF_GROUP[group_id]}) is {state}; merge the hosts\' '
                "files first (`deployctl ranktable merge`)")
    return ("server_group_list",), "complete", 'not complete: expected groups "0", "1", "2" in that order'


def check_local_against_global(local: dict, global_document: dict, global_name: str, *,
                               require_host: bool = False) -> list[Violation]:
    """A local file's entry must equal its instance's entry in the global (matched by address and NPUs).

    Both documents must already have passed check_ranktable. A global without the local's server_ip
    (another host's per-host file) is no violation unless `require_host` (a complete global holds every host).
    """
    entry = local["server_list"][0]
    wanted_ids = [d["device_id"] for d in entry.get("device", ())]
    same_host = []
    for g, group in enumerate(global_document["server_group_list"]):
        for s, server in enumerate(group["server_list"]):
            if server["server_ip"] != entry["server_ip"]:
                continue
            same_host.append(server)
            if [d["device_id"] for d in server.get("device", ())] == wanted_ids:
                base = ("server_group_list", g, "server_list", s)
                return _differences(entry, server, ("server_list", 0), base, global_name)
    if not same_host and not require_host:
        return []
    what = f"devices {','.join(wanted_ids)}" if wanted_ids else "the scheduler"
    return [Violation(("server_list", 0), "local matches global",
                      f"{global_name} has no entry for {what} on {entry['server_ip']}")]


def check_local_against_globals(local: dict, globals_: Sequence[tuple[str, dict]]) -> list[Violation]:
    """A local given with global files: equal to its entry in every global that holds its host, and at
    least one of them must hold it. Every document must already have passed check_ranktable."""
    server_ip = local["server_list"][0]["server_ip"]
    holders = [(name, doc) for name, doc in globals_ if any(
        s["server_ip"] == server_ip for g in doc["server_group_list"] for s in g["server_list"])]
    if globals_ and not holders:
        names = ", ".join(name for name, _ in globals_)
        return [Violation(("server_list", 0, "server_ip"), "local matches global",
                          f"no global file given ({names}) has an entry on {server_ip}")]
    return [v for name, doc in holders for v in check_local_against_global(local, doc, name, require_host=True)]


def _differences(local: Any, expected: Any, path: tuple, base: tuple, name: str) -> list[Violation]:
    """Each place where a local entry (at `path`) differs from the global's (at `base` in file `name`)."""
    if local == expected:
        return []
    rule = "local matches global"
    if isinstance(local, dict) and isinstance(expected, dict):
        out = [v for key in expected if key in local
               for v in _differences(local[key], expected[key], path + (key,), base + (key,), name)]
        out += [Violation(path + (key,), rule, f"missing, but {name} has {json_path(base + (key,))}")
                for key in expected if key not in local]
        out += [Violation(path + (key,), rule, f"not in {name} {json_path(base)}") for key in local if key not in expected]
        return out
    if isinstance(local, list) and isinstance(expected, list) and len(local) == len(expected):
        return [v for i, (a, b) in enumerate(zip(local, expected))
                for v in _differences(a, b, path + (i,), base + (i,), name)]
    return [Violation(path, rule, f"{_short(local)} differs from {name} {json_path(base)}: {_short(expected)}")]


def _short(value: Any) -> str:
    import json

    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
