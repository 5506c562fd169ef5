"""The rules a set of vllm-ascend DP groups obeys, on plain data: each violation said once, quoting its values."""

from deployctl.spec.dp_groups import (
    DpGroup, device_problems, group_shape_problems, port_problems, roles_agree_problems,
)

PREFILL = DpGroup("prefill", 0, ("node1",), dp=2, tp=8, port=9100)
DECODE = DpGroup("decode", 1, ("node2", "node3"), dp=8, tp=4, port=9100)


def _said(violations):
    return [v.message for v in violations]


def test_the_qwen3_layout_breaks_no_rule():
    groups = (PREFILL, DECODE)
    assert [*group_shape_problems(PREFILL, 16), *group_shape_problems(DECODE, 16), *roles_agree_problems(groups),
            *device_problems(groups, 16), *port_problems(groups, "external", ("node1", 8000))] == []


def test_shapes_that_cannot_be_launched():
    def said(**changes):
        return _said(group_shape_problems(DpGroup(**{**DECODE.__dict__, **changes}), 16))

    assert said(dp=3) == ["decode group 1: dp 3 cannot be spread evenly over 2 host(s) (node2, node3): dp must be a "
                          "positive multiple of the host count"]
    assert said(dp=0)[0].startswith("decode group 1: dp 0 cannot be spread evenly")
    assert said(tp=6) == ["decode group 1: tp 6 is not a power of two from 1 to 16"]
    assert said(tp=32) == ["decode group 1: tp 32 is not a power of two from 1 to 16"]
    assert said(dp=8, tp=8) == ["decode group 1: 4 rank(s) per host x tp 8 = 32 devices, but each host has 16 "
                                "usable (0-15)"]
    assert said(devices=(0, 1, 2, 3)) == ["decode group 1: 4 rank(s) per host x tp 4 = 16 devices, but each host "
                                          "has 4 usable (0-3)"]


def test_groups_of_a_role_share_one_shape():
    other = DpGroup("prefill", 2, ("node4",), dp=4, tp=4, port=9100)
    said = list(roles_agree_problems((PREFILL, DECODE, other)))
    assert _said(said) == ["prefill group 2 has dp 4, tp 4, but prefill group 0 has dp 2, tp 8: every prefill group "
                           "must have the same dp and tp (the connector's config carries one pair per role)"]
    assert (said[0].group, said[0].key) == (other, "dp")


def test_a_device_serves_one_rank_across_the_deployment():
    mixed = DpGroup("mixed", 0, ("node1",), dp=2, tp=4, port=8000, devices=(0, 1, 2, 3, 4, 5, 6, 7))
    clash = DpGroup("mixed", 1, ("node1",), dp=1, tp=2, port=8100, devices=(6, 7))
    assert _said(device_problems((mixed, clash), 16)) == [
        "node1: NPUs 6,7 are used by mixed group 0 rank 1 on node1 and by mixed group 1 rank 0 on node1"]


def test_api_kv_rpc_and_proxy_ports_never_overlap_on_a_host():
    a = DpGroup("mixed", 0, ("node1",), dp=2, tp=4, port=8000, kv_port=30000)
    b = DpGroup("mixed", 1, ("node1",), dp=1, tp=4, port=30004, rpc_port=8001)
    said = _said(port_problems((a, b), "external", ("node1", 8000)))
    assert said == [
        "node1: port 30004 is both mixed group 0 kv ports 30000-30007 and mixed group 1 API port",
        "node1: port 8001 is both mixed group 0 API ports 8000-8001 and mixed group 1 rpc port",
        "node1: port 8000 is both mixed group 0 API ports 8000-8001 and the proxy"]
    assert list(port_problems((a,), "internal", ("node2", 8000))) == []  # another host: no clash
    high = DpGroup("mixed", 0, ("node1",), dp=2, tp=8, port=8000, kv_port=65530)
    assert _said(port_problems((high,), "internal")) == ["node1: mixed group 0 kv ports 65530-65545 go past 65535 "
                                                         "(ports 65536-65545)"]
