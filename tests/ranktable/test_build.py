"""build_host_ranktables and build_global_for_spec: the vendor's files, byte for byte."""

from __future__ import annotations

import json

import pytest

from deployctl.errors import RanktableError
from deployctl.ranktable.build import build_global_for_spec, build_host_ranktables
from deployctl.ranktable.check import check_ranktable
from deployctl.ranktable.model import to_json
from deployctl.spec.model import Host, Instance, ModelArgs, Spec
from tests.ranktable.samples import MERGE_INPUTS, document, facts, text


def _seed_001_inputs():
    """Host IP and device IPs as the pd-1host-global sample records them."""
    sample = facts("pd-1host-global")
    ips = {}
    for instance in sample["prefill"] + sample["decode"]:
        ips.update({int(d): ip for d, ip in zip(instance["device_ids"], instance["device_ips"])})
    return sample["scheduler"]["server_ip"], ips


def test_gen_of_seed_001_equals_the_vendor_files_byte_for_byte():
    host_ip, ips = _seed_001_inputs()
    files = build_host_ranktables(host_ip, [(4, 5)], [(6, 7)], True, ips).files()
    assert list(files) == [
        "global_ranktable_192.0.2.18.json",
        "local_ranktable_192.0.2.18_45.json",
        "local_ranktable_192.0.2.18_67.json",
        "local_ranktable_192.0.2.18_host.json",
    ]
    assert files["global_ranktable_192.0.2.18.json"] == text("pd-1host-global")
    assert files["local_ranktable_192.0.2.18_45.json"] == text("pd-1host-local-45")
    assert json.loads(files["local_ranktable_192.0.2.18_host.json"]) == {
        "version": "1.0", "status": "completed", "group_id": "0", "server_count": "1",
        "server_list": [{"server_id": "192.0.2.18", "server_ip": "192.0.2.18"}],
    }


def test_gen_of_both_2host_sample_hosts_equals_every_vendor_file():
    node1, node2 = facts("pd-2host-node1-global"), facts("pd-2host-node2-global")
    ips1 = {int(d): ip for i in node1["prefill"] for d, ip in zip(i["device_ids"], i["device_ips"])}
    ips2 = {int(d): ip for i in node2["decode"] for d, ip in zip(i["device_ids"], i["device_ips"])}
    files = build_host_ranktables("192.0.2.21", [(0, 1, 2, 3), (4, 5, 6, 7)], [], True, ips1).files()
    files |= build_host_ranktables("192.0.2.22", [], [(0, 1, 2, 3), (4, 5, 6, 7)], False, ips2).files()
    expected = {p.name: p.read_text(encoding="utf-8") for p in MERGE_INPUTS.iterdir()}
    assert files == expected


def test_a_host_that_only_runs_the_scheduler_writes_group_0_and_the_host_file():
    files = build_host_ranktables("10.200.0.5", [], [], True, {}).files()
    assert json.loads(files["global_ranktable_10.200.0.5.json"])["server_group_list"] == [
        {"group_id": "0", "server_count": "1", "server_list": [{"server_id": "10.200.0.5", "server_ip": "10.200.0.5"}]}
    ]
    assert list(files) == ["global_ranktable_10.200.0.5.json", "local_ranktable_10.200.0.5_host.json"]


REFUSED = "refused: 1 problem in the server lists; no file written"


@pytest.mark.parametrize("prefill, decode, lines", [
    ([(4, 5)], [(5, 6)], [REFUSED, "  --decode-server-list: decode instance 1 (5,6): NPU 5 of 10.200.0.5 already "
                                   "used at prefill instance 1 (4,5)"]),
    ([(0, 1)], [(2, 3, 4, 5)], [REFUSED, "  --decode-server-list: decode instance 1 (2,3,4,5): TP 4 differs from TP 2 "
                                         "of prefill instance 1 (0,1); every prefill and decode instance has one "
                                         "tensor-parallel size"]),
    ([()], [(2,)], [REFUSED, "  --prefill-server-list: prefill instance 1 (): a prefill instance needs at least one "
                             "device"]),
    ([(1, 12)], [(11, 2)], ["10.200.0.5: two instances would both write local_ranktable_10.200.0.5_112.json"]),
    ([], [], ["nothing to generate: give --prefill-server-list, --decode-server-list or --api-server"]),
])
def test_gen_refuses_what_would_break_the_deployment(prefill, decode, lines):
    ips = {d: f"10.200.1.{d + 1}" for d in range(16)}
    with pytest.raises(RanktableError) as info:
        build_host_ranktables("10.200.0.5", prefill, decode, False, ips)
    assert info.value.lines() == lines


def test_gen_without_a_device_ip_names_the_npu():
    with pytest.raises(RanktableError) as info:
        build_host_ranktables("10.200.0.5", [(0, 1)], [], False, {0: "10.200.1.1"})
    assert info.value.message == "10.200.0.5: NPU 1: no device IP"


def _spec(prefill_hosts=("node1", "node1"), decode_hosts=("node2", "node2"), scheduler="node1") -> Spec:
    def instance(role, index, host, devices, port):
        return Instance(role, index, host, devices, port, f"demo-{role}-{index}", len(devices))

    prefill = [instance("prefill", i, h, (0, 1, 2, 3) if i == 0 else (4, 5, 6, 7), 8080 + i)
               for i, h in enumerate(prefill_hosts)]
    decode = [instance("decode", i, h, (0, 1, 2, 3) if i == 0 else (4, 5, 6, 7), 8090 + i)
              for i, h in enumerate(decode_hosts)]
    return Spec(
        version=1, name="demo",
        hosts=(Host("node1", "192.0.2.21"), Host("node2", "192.0.2.22")),
        model=ModelArgs(served_name="m"), mode="disaggregated",
        instances=(*prefill, *decode, instance("scheduler", 0, scheduler, (), 9000)),
    )


def _sample_device_ips() -> dict[str, dict[int, str]]:
    merged = facts("pd-2host-merged")
    out: dict[str, dict[int, str]] = {"node1": {}, "node2": {}}
    for role, host in (("prefill", "node1"), ("decode", "node2")):
        for instance in merged[role]:
            out[host].update({int(d): ip for d, ip in zip(instance["device_ids"], instance["device_ips"])})
    return out


def test_global_for_spec_equals_the_vendor_merge_and_locals():
    built = build_global_for_spec(_spec(), _sample_device_ips(), {"node1": "192.0.2.21", "node2": "192.0.2.22"})
    assert built.global_json == text("pd-2host-merged")
    locals_by_name = {p.name: p.read_text(encoding="utf-8") for p in MERGE_INPUTS.glob("local_*.json")}
    assert built.local_files == {
        "node1": {n: locals_by_name[n] for n in ("local_ranktable_192.0.2.21_0123.json",
                                                 "local_ranktable_192.0.2.21_4567.json",
                                                 "local_ranktable_192.0.2.21_host.json")},
        "node2": {n: locals_by_name[n] for n in ("local_ranktable_192.0.2.22_0123.json",
                                                 "local_ranktable_192.0.2.22_4567.json")},
    }
    assert built.instance_files == {
        "demo-prefill-0": "local_ranktable_192.0.2.21_0123.json",
        "demo-prefill-1": "local_ranktable_192.0.2.21_4567.json",
        "demo-decode-0": "local_ranktable_192.0.2.22_0123.json",
        "demo-decode-1": "local_ranktable_192.0.2.22_4567.json",
        "demo-scheduler-0": "local_ranktable_192.0.2.21_host.json",
    }
    assert check_ranktable(json.loads(built.global_json), complete=True).valid


def test_global_for_spec_keeps_spec_order_for_node_ports():
    spec = _spec(prefill_hosts=("node2", "node1"), decode_hosts=("node1", "node2"), scheduler="node2")
    ips = {"node1": {d: f"10.200.1.{d + 1}" for d in range(8)}, "node2": {d: f"10.200.2.{d + 1}" for d in range(8)}}
    built = build_global_for_spec(spec, ips, {"node1": "10.200.0.1", "node2": "10.200.0.2"})
    groups = built.global_ranktable.groups
    assert [(g.group_id, [(s.server_ip, s.device_ids) for s in g.servers]) for g in groups] == [
        ("0", [("10.200.0.2", ())]),
        ("1", [("10.200.0.2", ("0", "1", "2", "3")), ("10.200.0.1", ("4", "5", "6", "7"))]),
        ("2", [("10.200.0.1", ("0", "1", "2", "3")), ("10.200.0.2", ("4", "5", "6", "7"))]),
    ]


def test_global_for_spec_names_host_and_npu_without_a_device_ip():
    ips = _sample_device_ips()
    del ips["node2"][6]
    with pytest.raises(RanktableError) as info:
        build_global_for_spec(_spec(), ips, {"node1": "192.0.2.21", "node2": "192.0.2.22"})
    assert info.value.message == "node2 (192.0.2.22): NPU 6: no device IP (needed by demo-decode-1)"


def test_global_for_spec_refuses_two_hosts_with_the_same_device_ip():
    ips = _sample_device_ips()
    ips["node2"][0] = ips["node1"][0]  # a copied hccn.conf
    with pytest.raises(RanktableError) as info:
        build_global_for_spec(_spec(), ips, {"node1": "192.0.2.21", "node2": "192.0.2.22"})
    assert [p.render() for p in info.value.problems] == [
        "demo: server_group_list[2].server_list[0].device[0].device_ip: 198.51.100.21 already used at "
        "demo server_group_list[1].server_list[0].device[0]"
    ]


def test_to_json_has_no_trailing_newline_and_keeps_key_order():
    host_ip, ips = _seed_001_inputs()
    table = build_host_ranktables(host_ip, [(4, 5)], [(6, 7)], True, ips).global_ranktable
    out = to_json(table)
    assert out.endswith("}") and out == text("pd-1host-global")
    assert list(json.loads(out)) == ["version", "status", "server_group_list"]
    assert document("pd-1host-global") == json.loads(out)
