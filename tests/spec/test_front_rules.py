"""`topology.front` and `rollout`: the front each topology may have, located errors for the rest (issue 31)."""

from __future__ import annotations

import pytest

from deployctl.spec.load import check_spec_text, load_spec_text

HEAD = """version: 1
name: mix2
hosts:
  tb1: {address: 10.200.0.11}
image: {name: "deployctl/standin-vllm:latest"}
weights: {dest: /srv/models/tiny}
model: {served_name: tiny, max_num_seqs: 8}
"""
MIXED = HEAD + """topology:
  mode: mixed
  front: %s
  instances:
    - {host: tb1, devices: [0], port: 9001}
    - {host: tb1, devices: [1], port: 9002}
"""
ROUTER = "{kind: vllm-router, host: tb1, port: 8000, image: 'vllm-router:0.1.17'}"
ASCENDCLOUD_PD = HEAD + """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9000}
  front: {kind: vllm-router, host: tb1, image: r}
  prefill: [{host: tb1, devices: [0], port: 9001}]
  decode: [{host: tb1, devices: [1], port: 9002}]
"""
UPSTREAM_PD = """version: 1
name: pd
server: vllm-ascend
hosts:
  tb1: {address: 10.200.0.11}
image: {name: "quay.io/ascend/vllm-ascend:v0.13.0rc1"}
weights: {dest: /srv/models/tiny}
model: {served_name: tiny}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  %s
  prefill: [{hosts: [tb1], dp: 2, tp: 1, port: 9100, devices: [0, 1]}]
  decode: [{hosts: [tb1], dp: 2, tp: 1, port: 9200, devices: [2, 3]}]
"""


def errors(text: str) -> list[str]:
    _, found, _ = check_spec_text(text, "s.yaml")
    return [f"{p.line}:{p.dotted_path}: {p.message}" for p in found]


def test_a_mixed_deployment_with_a_router_front_loads_it_as_the_router_instance():
    spec = load_spec_text(MIXED % ROUTER)
    assert spec.front_spec.kind == "vllm-router" and spec.front_spec.image == "vllm-router:0.1.17"
    assert spec.front.role == "router" and spec.front.name == "mix2-router" and spec.front.port == 8000
    assert spec.start_order[-1] == (spec.front,)


def test_the_ascendcloud_scheduler_flow_refuses_a_front_and_names_why():
    found = errors(ASCENDCLOUD_PD)
    assert len(found) == 1 and found[0].startswith("11:topology.front: the AscendCloud P/D flow keeps its scheduler")


@pytest.mark.parametrize("front, expected", [
    ("{kind: proxy, host: tb1}", "10:topology.front.kind: kind proxy is vllm-ascend's P/D proxy"),
    ("{kind: vllm-router, host: tb1}", "10:topology.front: kind vllm-router needs front.image"),
    ("{kind: vllm-router, host: tb9, image: r}", "10:topology.front.host: unknown host 'tb9'"),
    ("{kind: vllm-router, host: tb1, port: 9002, image: r}",
     "10:topology.front.port: port 9002 on host tb1 (the vllm-router) is already used by topology.instances[1].port (line 13)"),
    ("{kind: haproxy, host: tb1}", "10:topology.front.kind:"),
    # issue 39: the router's metrics port is one of the ports the deployment binds
    ("{kind: vllm-router, host: tb1, image: r, metrics_port: 9001}",
     "10:topology.front.metrics_port: port 9001 on host tb1 (the vllm-router's metrics port) is already used by "
     "topology.instances[0].port"),
    ("{kind: vllm-router, host: tb1, port: 8000, image: r, metrics_port: 8000}",
     "10:topology.front.metrics_port: port 8000 on host tb1 (the vllm-router's metrics port) is already used by "
     "the vllm-router (topology.front.port"),
    ("{kind: vllm-router, host: tb1, image: r, metrics_port: 99999}", "10:topology.front.metrics_port:"),
])
def test_a_wrong_front_is_an_error_at_its_path_and_line(front, expected):
    found = errors(MIXED % front)
    assert any(line.startswith(expected) for line in found), found


def test_the_router_metrics_port_default_is_checked_against_the_servers_too():
    spec = load_spec_text(MIXED % ROUTER)
    assert spec.front_spec.metrics_port == spec.front.metrics_port == 19000
    found = errors((MIXED % ROUTER).replace("port: 9002}", "port: 19000}"))
    assert any(e.startswith("10:topology.front: port 19000 on host tb1 (the vllm-router's metrics port, default "
                            "metrics_port 19000) is already used by topology.instances[1].port") for e in found), found
    assert load_spec_text(UPSTREAM_PD % "proxy: {host: tb1, port: 8000}").front.metrics_port is None


UPSTREAM_MIXED = """version: 1
name: mx
server: vllm-ascend
hosts:
  tb1: {address: 10.200.0.11}
image: {name: "quay.io/ascend/vllm-ascend:v0.13.0rc1"}
weights: {dest: /srv/models/tiny}
model: {served_name: tiny}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb1, port: 8000, image: r%s}
  groups: [{hosts: [tb1], dp: 2, tp: 1, port: 9100, devices: [0, 1]}]
"""


def test_vllm_ascend_router_metrics_port_against_its_groups_ports():
    """A mixed group runs no KV connector (no kv ports); its API and rpc ports are in the one port set."""
    assert errors(UPSTREAM_MIXED % "") == [] and errors(UPSTREAM_MIXED % ", metrics_port: 28001") == []
    found = errors(UPSTREAM_MIXED % ", metrics_port: 9100")
    assert any(e.startswith("11:topology.front.metrics_port: port 9100 on host tb1 (the vllm-router's metrics port) "
                            "is already used by mixed group 0") for e in found), found


def test_vllm_ascend_pd_keeps_its_proxy_as_kind_proxy_written_either_way():
    old = load_spec_text(UPSTREAM_PD % "proxy: {host: tb1, port: 8000}")
    new = load_spec_text(UPSTREAM_PD % "front: {kind: proxy, host: tb1, port: 8000}")
    assert old.front_spec == new.front_spec and new.front_spec.kind == "proxy"
    assert [i.name for i in old.instances] == [i.name for i in new.instances] and new.front.role == "proxy"


def test_vllm_ascend_pd_refuses_a_router_and_a_second_front():
    assert any("deployctl runs vllm-router in front of mixed servers only" in e
               for e in errors(UPSTREAM_PD % "front: {kind: vllm-router, host: tb1, image: r}"))
    both = errors(UPSTREAM_PD % "proxy: {host: tb1}\n  front: {kind: proxy, host: tb1, port: 8001}")
    assert any("topology.proxy and topology.front are the same front" in e for e in both)
    clash = errors(UPSTREAM_PD % "front: {kind: proxy, host: tb1, port: 9100}")
    assert any(e.startswith("13:topology.front.port:") and "the proxy" in e for e in clash), clash


def test_rollout_drain_needs_a_front():
    text = HEAD + """topology:
  mode: mixed
  instances: [{host: tb1, devices: [0], port: 9001}]
rollout: {strategy: drain}
"""
    found = errors(text)
    assert found and found[0].startswith("11:rollout.strategy: strategy drain takes each instance out of the front")
    assert errors(text.replace("drain", "recreate")) == []
    assert load_spec_text(MIXED % ROUTER + "rollout: {strategy: drain, max_unavailable: 2, max_surge: 1}").rollout \
        .max_surge == 1


def test_rollout_values_are_bounded_by_the_schema():
    found = errors(MIXED % ROUTER + "rollout: {max_unavailable: 0, strategy: rolling}")
    assert any("rollout.max_unavailable" in e for e in found) and any("rollout.strategy" in e for e in found)
