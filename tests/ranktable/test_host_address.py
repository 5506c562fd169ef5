"""The pure parts of `gen` on a host: which address is server_ip, where a device IP comes from."""

from __future__ import annotations

import pytest

from deployctl.errors import RanktableError
from deployctl.facts.files import parse_hccn_conf
from deployctl.ranktable.device_ips import ToolAnswer, resolve_device_ip
from deployctl.ranktable.host_address import BoundAddress, choose_host_ip, parse_default_route, parse_ip_addr
from tests.ranktable.samples import ROOT

IP_ADDR = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "2: eth1    inet 10.200.0.7/24 brd 10.200.0.255 scope global eth1\\       valid_lft forever preferred_lft forever\n"
    "4: eth0    inet 10.200.1.2/24 brd 10.200.1.255 scope global eth0\\       valid_lft forever preferred_lft forever\n"
)
HCCN = ROOT.parent / "hccn_tool"
CONF = parse_hccn_conf((ROOT.parent / "files" / "hccn-conf-8dev" / "stdout.txt").read_text())


def test_parse_ip_addr():
    assert parse_ip_addr(IP_ADDR) == (
        BoundAddress("lo", "127.0.0.1", "host"),
        BoundAddress("eth1", "10.200.0.7", "global"),
        BoundAddress("eth0", "10.200.1.2", "global"),
    )


def test_the_default_route_interface_wins_and_loopback_never():
    addresses = parse_ip_addr(IP_ADDR)
    assert parse_default_route("default via 10.200.1.1 dev eth0 proto static \n") == "eth0"
    assert choose_host_ip(addresses, "eth0") == "10.200.1.2"
    assert choose_host_ip(addresses, None) == "10.200.0.7"
    with pytest.raises(RanktableError):
        choose_host_ip(addresses[:1], None)
    assert parse_default_route("") is None


def test_device_ip_from_the_tool_then_the_conf():
    good = ToolAnswer((HCCN / "ip-g-dev0" / "stdout.txt").read_text())
    failed = ToolAnswer("", 13, (HCCN / "ip-g-no-ip-configured" / "stderr.txt").read_text())
    assert resolve_device_ip(0, good, None, "/etc/hccn.conf") == "198.51.100.11"
    assert resolve_device_ip(5, failed, CONF, "/etc/hccn.conf") == "198.51.100.16"
    assert resolve_device_ip(5, ToolAnswer(None), CONF, "/etc/hccn.conf") == "198.51.100.16"


def test_no_device_ip_anywhere_names_the_npu_and_both_sources():
    failed = ToolAnswer("", 13, (HCCN / "ip-g-no-ip-configured" / "stderr.txt").read_text())
    with pytest.raises(RanktableError) as info:
        resolve_device_ip(9, failed, CONF, "/etc/hccn.conf")
    assert info.value.message == ("NPU 9: no device IP: hccn_tool -i 9 -ip -g printed none (Get ipconf failed, "
                                  "because no ip was preset there!) and /etc/hccn.conf has no address_9")
    with pytest.raises(RanktableError) as info:
        resolve_device_ip(5, ToolAnswer(None), None, "/etc/hccn.conf", where="node1")
    assert info.value.message == ("node1: NPU 5: no device IP: hccn_tool is not installed (not on PATH, not at "
                                  "/usr/local/Ascend/driver/tools/hccn_tool) and /etc/hccn.conf does not exist")


def test_the_nic_that_carries_a_hosts_address_is_read_never_typed():
    from deployctl.ranktable.host_address import interface_carrying

    text = (ROOT.parent / "system" / "ip-o-4-addr-two-nics" / "stdout.txt").read_text()
    addresses = parse_ip_addr(text)
    assert interface_carrying(addresses, "192.0.2.21") == "enp189s0f0"
    assert interface_carrying(addresses, "198.51.100.21") == "enp61s0f3"
    assert interface_carrying(addresses, "203.0.113.9") is None
