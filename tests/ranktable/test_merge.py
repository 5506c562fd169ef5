"""merge: the vendor's merge, byte for byte, and the refusals."""

from __future__ import annotations

import json

import pytest

from deployctl.errors import RanktableError
from deployctl.ranktable.merge import merge
from deployctl.ranktable.model import Group, Ranktable, Server, ranktable_from_document, to_json
from tests.ranktable.samples import MERGE_INPUTS, text

NODE1 = MERGE_INPUTS / "global_ranktable_192.0.2.21.json"
NODE2 = MERGE_INPUTS / "global_ranktable_192.0.2.22.json"


def _table(path) -> Ranktable:
    return ranktable_from_document(json.loads(path.read_text(encoding="utf-8")))


def test_merge_of_the_2host_inputs_equals_the_vendor_output_byte_for_byte():
    assert to_json(merge([_table(NODE1), _table(NODE2)])) == text("pd-2host-merged")


def test_merge_accepts_empty_groups_as_the_vendor_tool_writes_them():
    node2 = json.loads(NODE2.read_text())
    node2["server_group_list"][:0] = [{"group_id": g, "server_count": "0", "server_list": []} for g in ("0", "1")]
    assert to_json(merge([_table(NODE1), ranktable_from_document(node2)])) == text("pd-2host-merged")


def test_merge_keeps_input_order():
    merged = merge([_table(NODE2), _table(NODE1)])
    assert [s.server_ip for s in merged.group("1") + merged.group("2")] == ["192.0.2.21"] * 2 + ["192.0.2.22"] * 2


def test_two_schedulers_are_refused():
    other = Ranktable((Group("0", (Server("192.0.2.23", "192.0.2.23"),)),))
    with pytest.raises(RanktableError) as info:
        merge([_table(NODE1), _table(NODE2), other], ["a.json", "b.json", "c.json"])
    assert info.value.message == 'two schedulers: a.json, c.json each hold a group "0" server; a deployment has one'


def test_duplicate_device_ip_is_refused_with_both_places():
    node2 = json.loads(NODE2.read_text())
    node2["server_group_list"][0]["server_list"][1]["device"][3]["device_ip"] = "198.51.100.21"
    with pytest.raises(RanktableError) as info:
        merge([_table(NODE1), ranktable_from_document(node2)], ["a.json", "b.json"])
    assert [p.render() for p in info.value.problems] == [
        "b.json: server_group_list[0].server_list[1].device[3].device_ip: 198.51.100.21 already used at "
        "a.json server_group_list[1].server_list[0].device[0]"
    ]


def test_the_same_npu_twice_is_refused():
    with pytest.raises(RanktableError) as info:
        merge([_table(NODE1), _table(NODE2), _table(NODE2)], ["a.json", "b.json", "b.json"])
    assert info.value.message == "refused: 16 duplicates (an NPU or device IP twice); the first 10:"
    assert info.value.problems[0].render() == (
        "b.json: server_group_list[0].server_list[0].device[0].device_id: NPU 0 of 192.0.2.22 already used at "
        "b.json server_group_list[0].server_list[0].device[0]")


@pytest.mark.parametrize("inputs, message", [
    ([NODE1], 'no decode in any input: group "2" would be empty'),
    ([NODE2], 'no scheduler in any input: group "0" would be empty'),
])
def test_a_merge_that_cannot_serve_is_refused(inputs, message):
    with pytest.raises(RanktableError) as info:
        merge([_table(p) for p in inputs])
    assert info.value.message == message


def test_differing_tp_across_hosts_is_refused():
    node2 = json.loads(NODE2.read_text())
    for server in node2["server_group_list"][0]["server_list"]:
        del server["device"][2:]
    with pytest.raises(RanktableError) as info:
        merge([_table(NODE1), ranktable_from_document(node2)])
    assert info.value.message == "prefill and decode instances must share one tensor-parallel size, got [2, 4]"
