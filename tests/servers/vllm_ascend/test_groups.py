"""The rules a set of vllm-ascend DP groups obeys, on plain data: each violation said once, quoting its values."""

from deployctl.servers.vllm_ascend.groups import (
    DpGroup, device_problems, group_shape_problems, port_uses, roles_agree_problems,
)
from deployctl.servers.vllm_ascend.ports import group_ports
from deployctl.spec.port_set import collision_message, collisions, front_port

PREFILL = DpGroup("prefill", 0, ("node1",), dp=2, tp=8, port=9100)
DECODE = DpGroup("decode", 1, ("node2", "node3"), dp=8, tp=4, port=9100)


def _said(violations):
    return [v.message for v in violations]


def _clashes(groups, launch, proxy=None):
    """The port set's collisions of these groups (and a proxy (host, port)), said as validate says them."""
    uses = [u for g in groups for u in group_ports(g, launch, ("topology", "groups", g.index), ())]
    uses += [front_port(("topology", "proxy"), proxy[0], proxy[1], "the proxy", 8000)] if proxy else []
    return [collision_message(c) for c in collisions(uses)]


def test_the_qwen3_layout_breaks_no_rule():
    groups = (PREFILL, DECODE)
    assert [*group_shape_problems(PREFILL, 16), *group_shape_problems(DECODE, 16), *roles_agree_problems(groups),
            *device_problems(groups, 16)] == [] and _clashes(groups, "external", ("node1", 8000)) == []


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
    a = DpGroup("prefill", 0, ("node1",), dp=2, tp=4, port=8000, kv_port=30000)
    b = DpGroup("decode", 1, ("node1",), dp=1, tp=4, port=30004, rpc_port=8001)
    assert _clashes((a, b), "external", ("node1", 8000)) == [
        "port 30004 on host node1 (decode group 1 API port) is already used by prefill group 0 kv ports 30000-30007 "
        "(topology.groups[0])",
        "port 8001 on host node1 (decode group 1 rpc port) is already used by prefill group 0 API ports 8000-8001 "
        "(topology.groups[0])",
        "port 8000 on host node1 (the proxy) is already used by prefill group 0 API ports 8000-8001 "
        "(topology.groups[0])"]
    assert _clashes((a,), "internal", ("node2", 8000)) == []  # another host: no clash
    high = DpGroup("prefill", 0, ("node1",), dp=2, tp=8, port=8000, kv_port=65530)
    assert _clashes((high,), "internal") == ["prefill group 0 kv ports 65530-65545 on host node1 go past 65535 "
                                             "(ports 65536-65545)"]


def test_a_mixed_group_binds_no_kv_port():
    """Only P/D servers run the KV connector (servers/vllm_ascend/upstream.py passes --kv-transfer-config to them
    alone)."""
    mixed = DpGroup("mixed", 0, ("node1",), dp=2, tp=4, port=8000, kv_port=30000)
    assert [key for *_, key, _ in port_uses(mixed, "internal")] == ["port", "rpc_port"]
    assert _clashes((mixed,), "internal", ("node1", 30000)) == []
