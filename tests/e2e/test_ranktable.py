"""`ranktable gen SPEC` and `validate --against-hosts` against the test bed's live hosts."""

import json

from tests.e2e.conftest import MODEL

TOPOLOGY = """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9300}
  prefill:
    - {host: tb1, devices: [4, 5], port: 8388}
  decode:
    - {host: tb2, devices: [6, 7], port: 8389}
"""


def test_gen_spec_takes_device_ips_from_each_hosts_hccn_tool(bed, deployctl, tmp_path):
    path = deployctl.write(bed.spec_yaml("e2e-rt", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=MODEL))
    out_dir = tmp_path / "rt"
    code, out, err = deployctl("ranktable", "gen", path, "--save-dir", out_dir)
    assert code == 0, err
    merged = json.loads((out_dir / "global_ranktable_merge.json").read_text())
    prefill, decode = merged["server_group_list"][1]["server_list"], merged["server_group_list"][2]["server_list"]
    assert [(d["device_id"], d["device_ip"]) for d in prefill[0]["device"]] == [("4", "10.201.1.14"), ("5", "10.201.1.15")]
    assert [(d["device_id"], d["device_ip"]) for d in decode[0]["device"]] == [("6", "10.201.2.16"), ("7", "10.201.2.17")]
    assert merged["server_group_list"][0]["server_list"] == [{"server_id": "10.200.0.11", "server_ip": "10.200.0.11"}]
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "global_ranktable_merge.json", "local_ranktable_10.200.0.11_45.json", "local_ranktable_10.200.0.11_host.json",
        "local_ranktable_10.200.0.12_67.json"]

    files = [str(p) for p in sorted(out_dir.iterdir())]
    code, document = deployctl.json("ranktable", "validate", *files, "--against-hosts", path)
    assert code == 0 and document["valid"], document
    tampered = json.loads((out_dir / "global_ranktable_merge.json").read_text())
    tampered["server_group_list"][2]["server_list"][0]["device"][1]["device_ip"] = "10.201.2.99"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(tampered, indent=4))
    code, document = deployctl.json("ranktable", "validate", bad, "--against-hosts", path)
    assert code == 2
    assert document["files"][0]["errors"] == [{
        "json_path": "server_group_list[2].server_list[0].device[1].device_ip",
        "message": "10.201.2.99 but tb2 (10.200.0.12) reports 10.201.2.17 for NPU 7", "rule": "against-hosts"}]


def test_host_without_a_device_ip_is_a_clear_error(bed, deployctl, restore_profiles):
    profile_ips = list(bed.profile("tb2")["device_ips"])
    profile_ips[7] = None
    bed.set_profile("tb2", device_ips=profile_ips)
    bed.run_on("tb2", ["sed", "-i", "/address_7/d", "/etc/hccn.conf"])
    path = deployctl.write(bed.spec_yaml("e2e-rt2", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=MODEL))
    code, out, err = deployctl("ranktable", "gen", path)
    assert code == 2
    assert "tb2: NPU 7: no device IP" in err and "Traceback" not in err


def test_a_device_ip_missing_from_hccn_tool_comes_from_the_hosts_hccn_conf(bed, deployctl, restore_profiles, tmp_path):
    # the real /etc/hccn.conf of a test bed host: no environment knob points deployctl at another file
    profile_ips = list(bed.profile("tb2")["device_ips"])
    profile_ips[7] = None
    bed.set_profile("tb2", device_ips=profile_ips)
    assert bed.run_on("tb2", ["hccn_tool", "-i", "7", "-ip", "-g"], check=False).stdout.strip() == ""
    bed.run_on("tb2", ["sh", "-c", "echo address_7=10.201.2.77 >> /etc/hccn.conf"])
    path = deployctl.write(bed.spec_yaml("e2e-rt3", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=MODEL))
    code, out, err = deployctl("ranktable", "gen", path, "--save-dir", tmp_path / "rt")
    assert code == 0, err
    merged = json.loads((tmp_path / "rt" / "global_ranktable_merge.json").read_text())
    decode = merged["server_group_list"][2]["server_list"][0]["device"]
    assert [(d["device_id"], d["device_ip"]) for d in decode] == [("6", "10.201.2.16"), ("7", "10.201.2.77")]


def test_the_address_of_a_host_is_one_bound_on_it(bed, deployctl):
    # what `address: local` uses, asked of a real host over SSH: tb1 has no default route, so its global address
    from deployctl.gather import bound_host_ip
    from deployctl.hosts import connected
    from deployctl.spec.load import load_spec

    spec = load_spec(deployctl.write(bed.spec_yaml("e2e-rt4", TOPOLOGY, hosts_used=["tb1", "tb2"], extra=MODEL)))
    with connected(spec, hosts=spec.hosts[:1]) as transports:
        assert bound_host_ip(transports["tb1"], "tb1", hint="") == "10.200.0.11"
