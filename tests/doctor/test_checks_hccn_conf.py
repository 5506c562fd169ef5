"""A stale /etc/hccn.conf entry (the file and the live NIC disagree) FAILs naming the NPU and both addresses."""

from deployctl.facts.hccn_model import HccnConf, HccnDeviceConf, HccnDeviceFacts, HccnIp
from deployctl.facts.model import HostFacts
from deployctl.doctor.checks_hccn import check_hccn_conf


def facts(live: dict, configured: dict) -> HostFacts:
    return HostFacts(hccn=tuple(HccnDeviceFacts(n, ip=HccnIp(ip, "255.255.255.0")) for n, ip in live.items()),
                     hccn_conf=HccnConf(tuple(HccnDeviceConf(n, address=ip) for n, ip in configured.items())))


def test_one_stale_entry_out_of_many_fails_with_both_addresses_and_the_fix():
    live = {n: f"10.201.1.{10 + n}" for n in range(8)}
    (finding,) = check_hccn_conf(facts(live, {**live, 5: "10.201.1.99"}), tuple(range(8)))
    assert (finding.name, finding.status, finding.npu) == ("hccn_conf", "FAIL", 5)
    assert finding.observed == "NPU 5: /etc/hccn.conf says 10.201.1.99, the NIC has 10.201.1.15"
    assert finding.fix.startswith("set address_5=10.201.1.15 in /etc/hccn.conf")


def test_an_agreeing_file_passes_and_no_file_is_left_to_hccn_ip():
    live = {0: "10.201.1.10", 1: "10.201.1.11"}
    (finding,) = check_hccn_conf(facts(live, live), (0, 1))
    assert (finding.status, finding.observed) == ("PASS", "agrees on NPU 0,1")
    assert check_hccn_conf(HostFacts(), (0, 1)) == ()
