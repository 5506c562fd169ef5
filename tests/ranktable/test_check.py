"""check_ranktable: the kind of every sample, and each rule with its JSON path."""

from __future__ import annotations

import copy
import json

import pytest

from deployctl.ranktable.check import check_local_against_global, check_ranktable
from tests.ranktable.samples import CASES, MERGE_INPUTS, document, facts


def _found(result) -> list[tuple[str, str]]:
    return [(v.json_path, v.rule) for v in result.problems]


@pytest.mark.parametrize("case", CASES)
def test_every_sample_gets_its_kind_and_exactly_its_errors(case):
    result = check_ranktable(document(case))
    expected = facts(case)
    assert result.kind == expected["kind"]
    assert result.valid is expected["valid"]
    assert _found(result) == [(e["json_path"], e["rule"]) for e in expected["errors"]]


def test_duplicate_device_ip_message_names_the_first_use():
    (problem,) = check_ranktable(document("broken-duplicate-device-ip")).problems
    assert problem.message == "203.0.113.14 already used at server_group_list[1].server_list[0].device[0].device_ip"


@pytest.mark.parametrize("case", CASES)
def test_complete_accepts_only_complete_globals(case):
    expected = facts(case)
    result = check_ranktable(document(case), complete=True)
    assert result.valid is (expected["valid"] and expected.get("valid_as_complete_global", False))


def test_complete_says_which_group_is_missing():
    (problem,) = check_ranktable(document("pd-2host-node2-global"), complete=True).problems
    assert (problem.json_path, problem.rule) == ("server_group_list", "complete")
    assert problem.message.startswith('not complete: group "0" (scheduler) is missing')


def test_merge_inputs_are_valid_with_their_kinds():
    kinds = {p.name: check_ranktable(json.loads(p.read_text())).kind for p in sorted(MERGE_INPUTS.iterdir())}
    assert kinds == {
        "global_ranktable_192.0.2.21.json": "pd-global-partial",
        "global_ranktable_192.0.2.22.json": "pd-global-partial",
        "local_ranktable_192.0.2.21_0123.json": "pd-local",
        "local_ranktable_192.0.2.21_4567.json": "pd-local",
        "local_ranktable_192.0.2.21_host.json": "pd-local",
        "local_ranktable_192.0.2.22_0123.json": "pd-local",
        "local_ranktable_192.0.2.22_4567.json": "pd-local",
    }
    assert all(check_ranktable(json.loads(p.read_text())).valid for p in MERGE_INPUTS.iterdir())


def _edited(case: str, edit) -> dict:
    doc = copy.deepcopy(document(case))
    edit(doc)
    return doc


def _prefill(doc, s=0):
    return doc["server_group_list"][1]["server_list"][s]


P0 = "server_group_list[1].server_list[0]"
BROKEN = [
    ("rank gap", lambda d: _prefill(d)["device"][1].update(rank_id="2"),
     [(f"{P0}.device[1].rank_id", "rank_id")]),
    ("rank twice", lambda d: _prefill(d)["device"][1].update(rank_id="0"),
     [(f"{P0}.device[1].rank_id", "rank_id")]),
    ("npu twice in one instance", lambda d: _prefill(d)["device"][1].update(device_id="4"),
     [(f"{P0}.device[1].device_id", "device_id unique")]),
    ("npu twice on one host", lambda d: d["server_group_list"][2]["server_list"][0]["device"][0].update(device_id="4"),
     [("server_group_list[2].server_list[0].device[0].device_id", "device_id unique")]),
    ("bad device ip", lambda d: _prefill(d)["device"][0].update(device_ip="203.0.113.300"),
     [(f"{P0}.device[0].device_ip", "ipv4")]),
    ("hostname as server ip", lambda d: _prefill(d).update(server_ip="localhost"),
     [(f"{P0}.server_ip", "ipv4")]),
    ("status", lambda d: d.update(status="initializing"), [("status", "status")]),
    ("version", lambda d: d.update(version="1.2"), [("version", "version")]),
    ("missing key", lambda d: _prefill(d)["device"][0].pop("device_ip"), [(f"{P0}.device[0].device_ip", "required")]),
    ("server_count", lambda d: d["server_group_list"][1].update(server_count="2"),
     [("server_group_list[1].server_count", "server_count")]),
    ("two schedulers", lambda d: d["server_group_list"][0]["server_list"].append(
        {"server_id": "192.0.2.19", "server_ip": "192.0.2.19"}) or d["server_group_list"][0].update(server_count="2"),
     [("server_group_list[0].server_list[1]", "scheduler")]),
    ("scheduler with devices", lambda d: d["server_group_list"][0]["server_list"][0].update(device=[]),
     [("server_group_list[0].server_list[0].device", "scheduler")]),
    ("groups out of order", lambda d: d["server_group_list"].reverse(),
     [("server_group_list[1].group_id", "groups"), ("server_group_list[2].group_id", "groups")]),
    ("tp differs", lambda d: d["server_group_list"][2]["server_list"][0]["device"].pop(),
     [("server_group_list[2].server_list[0].device", "tp")]),
    ("empty instance", lambda d: _prefill(d).update(device=[]),
     [(f"{P0}.device", "device")]),
    ("not a list", lambda d: _prefill(d).update(device={"device_id": "4"}),
     [(f"{P0}.device", "type")]),
]


@pytest.mark.parametrize("name, edit, expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_rule_is_reported_with_its_path(name, edit, expected):
    assert _found(check_ranktable(_edited("pd-1host-global", edit))) == expected


def test_device_ids_are_checked_against_the_card_count_only_when_known():
    doc = document("pd-1host-global")
    assert check_ranktable(doc).valid
    result = check_ranktable(doc, cards=6)
    assert [(v.json_path, v.rule, v.message) for v in result.problems] == [
        ("server_group_list[2].server_list[0].device[0].device_id", "cards", "6 is not a device id (cards: 0-5)"),
        ("server_group_list[2].server_list[0].device[1].device_id", "cards", "7 is not a device id (cards: 0-5)"),
    ]
    assert check_ranktable(doc, cards=16).valid  # Atlas A3: 16 cards, never a fixed 8


def test_a_local_file_with_two_entries_is_refused():
    doc = _edited("pd-1host-local-45", lambda d: d["server_list"].append(copy.deepcopy(d["server_list"][0])))
    assert _found(check_ranktable(doc)) == [
        ("server_count", "server_count"), ("server_list", "server_list"),
        ("server_list[1].device[0].device_id", "device_id unique"),
        ("server_list[1].device[0].device_ip", "device_ip unique"),
        ("server_list[1].device[1].device_id", "device_id unique"),
        ("server_list[1].device[1].device_ip", "device_ip unique"),
    ]


def test_local_group_id_must_be_0():
    doc = _edited("pd-1host-local-45", lambda d: d.update(group_id="1"))
    assert _found(check_ranktable(doc)) == [("group_id", "group_id")]


def test_hccl_rank_ids_are_contiguous_over_all_servers():
    doc = _edited("hccl-v1.2-superpod-2server", lambda d: d["server_list"][1]["device"][1].update(rank_id="4"))
    assert _found(check_ranktable(doc)) == [("server_list[1].device[1].rank_id", "rank_id")]
    doc = _edited("hccl-v1.2-superpod-2server", lambda d: (
        d["server_list"][0]["device"][1].update(rank_id="2"), d["server_list"][1]["device"][0].update(rank_id="1")))
    assert _found(check_ranktable(doc)) == [("server_list[0].device", "rank_id"), ("server_list[1].device", "rank_id")]


def test_hccl_super_pod_servers_must_exist():
    doc = _edited("hccl-v1.2-superpod-2server",
                  lambda d: d["super_pod_list"][0]["server_list"][1].update(server_id="192.0.2.43"))
    result = check_ranktable(doc)
    assert [(v.json_path, v.rule, v.message) for v in result.problems] == [
        ("super_pod_list[0].server_list[1].server_id", "super_pod_list",
         '"192.0.2.43" is not a server_id of server_list'),
    ]


def test_hccl_v1_2_needs_super_device_id():
    doc = _edited("hccl-v1.2-superpod-2server", lambda d: d["server_list"][0]["device"][0].pop("super_device_id"))
    assert _found(check_ranktable(doc)) == [("server_list[0].device[0].super_device_id", "required")]


def test_hccl_v1_0_server_count_and_duplicate_ip():
    doc = _edited("mixed-1host-hccl-v1.0", lambda d: (
        d.update(server_count="2"), d["server_list"][0]["device"][1].update(device_ip="198.51.100.11")))
    assert _found(check_ranktable(doc)) == [
        ("server_count", "server_count"), ("server_list[0].device[1].device_ip", "device_ip unique")]


@pytest.mark.parametrize("doc", [[], "text", {"hello": 1}, None])
def test_something_else_is_unknown(doc):
    result = check_ranktable(doc)
    assert (result.kind, _found(result)) == ("unknown", [("(root)", "kind")])


def test_a_structure_the_rules_do_not_know_is_caught_by_the_schema():
    doc = _edited("pd-1host-global", lambda d: d["server_group_list"][0].update(server_list=[]) or
                  d["server_group_list"][0].update(server_count="0") or d["server_group_list"].pop(1))
    assert check_ranktable(doc).valid  # a per-host file with an empty scheduler group is a merge input
    doc = _edited("pd-1host-global", lambda d: d.update(server_group_list=[]))
    assert _found(check_ranktable(doc)) == [("server_group_list", "schema")]


def test_local_equals_its_entry_in_the_global():
    merged = document("pd-2host-merged")
    for path in MERGE_INPUTS.glob("local_*.json"):
        assert check_local_against_global(json.loads(path.read_text()), merged, "merged.json") == []
    local = json.loads((MERGE_INPUTS / "local_ranktable_192.0.2.22_4567.json").read_text())
    local["server_list"][0]["device"][2]["device_ip"] = "198.51.100.99"
    (problem,) = check_local_against_global(local, merged, "merged.json")
    assert (problem.json_path, problem.rule, problem.message) == (
        "server_list[0].device[2].device_ip", "local matches global",
        '"198.51.100.99" differs from merged.json server_group_list[2].server_list[1].device[2].device_ip: '
        '"198.51.100.37"')


def test_local_with_devices_the_global_does_not_have():
    merged = document("pd-2host-merged")
    local = json.loads((MERGE_INPUTS / "local_ranktable_192.0.2.21_0123.json").read_text())
    local["server_list"][0]["device"] = local["server_list"][0]["device"][:2]
    (problem,) = check_local_against_global(local, merged, "merged.json")
    assert (problem.json_path, problem.message) == (
        "server_list[0]", "merged.json has no entry for devices 0,1 on 192.0.2.21")
    # a local of a host the global does not hold at all belongs to another file: not judged here
    assert check_local_against_global(document("pd-1host-local-45"), merged, "merged.json") == []
