"""The `ranktable validate` document built from decoded files (pure): device entries, live device IPs."""

from __future__ import annotations

from deployctl.ranktable.check import check_ranktable
from deployctl.ranktable.validation import check_against_live, device_entries, devices_named, file_report
from tests.ranktable.samples import document

NODE1 = "pd-2host-node1-global"


def _entries(case: str):
    return list(device_entries(document(case)))


def test_device_entries_walk_every_group_of_a_pd_file():
    entries = _entries(NODE1)
    doc = document(NODE1)
    expected = [(server.get("server_ip") or server.get("server_id"), int(d["device_id"]), d["device_ip"])
                for group in doc["server_group_list"] for server in group["server_list"]
                for d in server.get("device") or []]
    assert [(ip, device, device_ip) for _, ip, device, device_ip in entries] == expected
    assert entries and entries[0][0].startswith("server_group_list[")


def test_device_entries_of_an_hccl_file_have_no_group_prefix():
    entries = _entries("hccl-v1.2-superpod-2server")
    assert entries and all(path.startswith("server_list[") for path, *_ in entries)


def test_device_entries_of_a_non_object_is_empty():
    assert list(device_entries([1, 2])) == []


def test_live_device_ips_agree_or_name_the_host_and_npu():
    doc = document(NODE1)
    (path, ip, device, device_ip), *rest = _entries(NODE1)
    documents = {"a.json": (check_ranktable(doc), doc)}
    wanted = devices_named(documents, {ip: "n1"})
    assert device in wanted["n1"]
    live = {"n1": {d: ip_ for _, server, d, ip_ in [(path, ip, device, device_ip), *rest] if server == ip}}
    reports = [file_report("a.json", "pd-global", [])]
    check_against_live(reports, documents, {ip: "n1"}, {"n1": "n1 (x)"}, live, "demo")
    others = [e for e in reports[0]["errors"] if "is not a host of demo" not in e["message"]]
    assert others == []
    live["n1"][device] = "10.0.0.99"
    reports = [file_report("a.json", "pd-global", [])]
    check_against_live(reports, documents, {ip: "n1"}, {"n1": "n1 (x)"}, live, "demo")
    assert {"json_path": path, "rule": "against-hosts",
            "message": f"{device_ip} but n1 (x) reports 10.0.0.99 for NPU {device}"} in reports[0]["errors"]
    assert reports[0]["valid"] is False
