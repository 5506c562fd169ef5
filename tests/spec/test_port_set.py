"""Every port a deployment binds on a host is in one set: a front on a port a server of its host binds is a
`validate` error naming both, with the kv ports the renderer gives the servers (issue 39 items 6 and 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployctl.servers.vllm_ascend.dp_launch import kv_transfer_config
from deployctl.spec.load import check_spec_text, load_spec_text

ROOT = Path(__file__).resolve().parents[2]
PD = (ROOT / "playbooks/vllm-ascend-pd-qwen3.yaml").read_text()  # prefill on node1, the proxy on node1
PROXY = "proxy: {host: node1, port: 8000}"


def _with(cards: int, proxy_port: int) -> str:
    assert PROXY in PD and "cards: 16" in PD and PD.count("tp: 8") == PD.count("tp: 4") == 1
    text = PD if cards == 16 else PD.replace("tp: 4", "tp: 2").replace("tp: 8", "tp: 4")  # half the NPUs a rank
    return text.replace("cards: 16", f"cards: {cards}").replace(PROXY, f"proxy: {{host: node1, port: {proxy_port}}}")


def _rendered_kv_ports(cards: int) -> list[int]:
    """The kv ports of prefill's servers on node1 as the renderer writes them into --kv-transfer-config."""
    spec = load_spec_text(_with(cards, 8000), environ={})
    prefill, decode = spec.upstream.groups[0], spec.upstream.groups[-1]
    servers = [i.server for i in spec.instances if i.server is not None and i.server.group.role == "prefill"]
    bases = {int(kv_transfer_config(s, spec.name, prefill, decode)["kv_port"]) for s in servers}
    (base,) = bases
    return list(range(base, base + prefill.ranks_per_host * prefill.tp))


@pytest.mark.parametrize("cards", [8, 16])
def test_a_front_on_a_rendered_kv_port_is_refused_naming_both(cards):
    ports = _rendered_kv_ports(cards)
    assert ports[0] == (36000 if cards == 16 else 28000)  # vllm-ascend's tutorial bases (dp_groups.py)
    for port in (ports[0], ports[-1]):
        spec, errors, _ = check_spec_text(_with(cards, port), "spec.yaml", environ={})
        assert spec is None and [e.dotted_path for e in errors] == ["topology.proxy.port"], errors
        assert errors[0].message == (f"port {port} on host node1 (the proxy) is already used by prefill group 0 "
                                     f"kv ports {ports[0]}-{ports[-1]} (topology.prefill[0], line 41)")


@pytest.mark.parametrize("cards", [8, 16])
def test_a_front_just_past_the_kv_ports_is_valid(cards):
    ports = _rendered_kv_ports(cards)
    for port in (ports[0] - 1, ports[-1] + 1):
        spec, errors, _ = check_spec_text(_with(cards, port), "spec.yaml", environ={})
        assert errors == [] and spec is not None


def test_on_16_npu_hosts_the_8_npu_base_is_free():
    """28000 is the kv base of 8-NPU hosts only: on 16-NPU hosts nothing binds it (vllm-ascend #6455)."""
    spec, errors, _ = check_spec_text(_with(16, 28000), "spec.yaml", environ={})
    assert errors == [] and spec is not None


# One set for both flavours: each kind of pair of users of a port is an error at the later one, naming the other
# with its key and line (issue 39 item 6).
SEED = """version: 1
name: seed
hosts:
  tb1: {address: 10.200.0.11}
image: {name: "deployctl/standin-vllm:latest"}
weights: {dest: /srv/models/tiny}
model: {served_name: tiny}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb1, port: 8000, image: r}
  instances:
    - {host: tb1, devices: [0], port: 9001}
    - {host: tb1, devices: [1], port: 9002}
monitor: {node_exporter_port: 9100, npu_exporter_port: 8082}
"""
SEED_PD = """version: 1
name: seedpd
hosts:
  tb1: {address: 10.200.0.11}
image: {name: "deployctl/standin-vllm:latest"}
weights: {dest: /srv/models/tiny}
model: {served_name: tiny}
topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9000}
  prefill: [{host: tb1, devices: [0], port: 9001}]
  decode: [{host: tb1, devices: [1], port: 9002}]
"""
UPSTREAM = """version: 1
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
  proxy: {host: tb1, port: 8000}
  prefill: [{hosts: [tb1], dp: 2, tp: 1, port: 9100, kv_port: 30000, rpc_port: 12345, devices: [0, 1]}]
  decode: [{hosts: [tb1], dp: 2, tp: 1, port: 9200, kv_port: 31000, rpc_port: 12346, devices: [2, 3]}]
monitor: {node_exporter_port: 9300, npu_exporter_port: 8082}
"""
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
  front: {kind: vllm-router, host: tb1, port: 8000, image: r}
  groups:
    - {hosts: [tb1], dp: 1, tp: 1, port: 9100, devices: [0]}
    - {hosts: [tb1], dp: 1, tp: 1, port: 9200, devices: [1]}
"""

PAIRS = [
    # seed flavour (AscendCloud's vLLM)
    ("two-instances", SEED, "port: 9002}", "port: 9001}", "topology.instances[1].port",
     "port 9001 on host tb1 is already used by topology.instances[0].port (line 12)"),
    ("front-vs-api", SEED, "port: 8000,", "port: 9002,", "topology.front.port",
     "port 9002 on host tb1 (the vllm-router) is already used by topology.instances[1].port (line 13)"),
    ("node-exporter-vs-api", SEED, "node_exporter_port: 9100", "node_exporter_port: 9001",
     "monitor.node_exporter_port", "port 9001 on host tb1 (node_exporter) is already used by "
     "topology.instances[0].port (line 12)"),
    ("npu-exporter-vs-front", SEED, "npu_exporter_port: 8082", "npu_exporter_port: 8000",
     "monitor.npu_exporter_port", "port 8000 on host tb1 (MindCluster npu-exporter) is already used by the "
     "vllm-router (topology.front.port, line 10)"),
    ("scheduler-vs-decode", SEED_PD, "port: 9002}", "port: 9000}", "topology.decode[0].port",
     "port 9000 on host tb1 is already used by topology.scheduler.port (line 10)"),
    # vllm-ascend
    ("proxy-vs-kv", UPSTREAM, "port: 8000}", "port: 30001}", "topology.proxy.port",
     "port 30001 on host tb1 (the proxy) is already used by prefill group 0 kv ports 30000-30001 "
     "(topology.prefill[0].kv_port, line 14)"),
    ("api-vs-rpc", UPSTREAM, "rpc_port: 12346", "rpc_port: 9101", "topology.decode[0].rpc_port",
     "port 9101 on host tb1 (decode group 0 rpc port) is already used by prefill group 0 API ports 9100-9101 "
     "(topology.prefill[0].port, line 14)"),
    ("two-groups-api", UPSTREAM, "port: 9200", "port: 9100", "topology.decode[0].port",
     "ports 9100,9101 on host tb1 (decode group 0 API ports 9100-9101) are already used by prefill group 0 API "
     "ports 9100-9101 (topology.prefill[0].port, line 14)"),
    ("kv-vs-kv", UPSTREAM, "kv_port: 31000", "kv_port: 30001", "topology.decode[0].kv_port",
     "port 30001 on host tb1 (decode group 0 kv ports 30001-30002) is already used by prefill group 0 kv ports "
     "30000-30001 (topology.prefill[0].kv_port, line 14)"),
    ("node-exporter-vs-api-groups", UPSTREAM, "node_exporter_port: 9300", "node_exporter_port: 9200",
     "monitor.node_exporter_port", "port 9200 on host tb1 (node_exporter) is already used by decode group 0 API "
     "ports 9200-9201 (topology.decode[0].port, line 15)"),
    ("npu-exporter-vs-rpc", UPSTREAM, "npu_exporter_port: 8082", "npu_exporter_port: 12345",
     "monitor.npu_exporter_port", "port 12345 on host tb1 (MindCluster npu-exporter) is already used by prefill "
     "group 0 rpc port (topology.prefill[0].rpc_port, line 14)"),
    ("router-vs-api", UPSTREAM_MIXED, "port: 8000,", "port: 9200,", "topology.front.port",
     "port 9200 on host tb1 (the vllm-router) is already used by mixed group 1 API port "
     "(topology.groups[1].port, line 14)"),
]


@pytest.mark.parametrize("spec, old, new, path, message", [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS])
def test_each_kind_of_pair_on_a_port_is_one_error_naming_both(spec, old, new, path, message):
    assert check_spec_text(spec, "spec.yaml", environ={})[1] == []  # as written: every port its own
    assert spec.count(old) == 1
    _, errors, _ = check_spec_text(spec.replace(old, new), "spec.yaml", environ={})
    assert [(e.dotted_path, e.message) for e in errors] == [(path, message)]


def test_a_router_on_the_kv_base_of_a_mixed_group_is_valid():
    """A mixed group runs no KV connector, so its default kv base (28000) is free (validate refused it before)."""
    assert check_spec_text(UPSTREAM_MIXED.replace("port: 8000,", "port: 28000,"), "spec.yaml", environ={})[1] == []


TRITON = """version: 1
platform: gpu
server: triton
name: tr
hosts:
  node1: {address: 10.200.0.11}
model: {served_name: demo-model, max_model_len: 4096, max_num_batched_tokens: 4096}
topology:
  mode: mixed
  instances:
    - {host: node1, devices: [0], port: 8000}
    - {host: node1, devices: [1], port: 8100, grpc_port: 8111, metrics_port: 8112}
monitor: {node_exporter_port: 9100, npu_exporter_port: 8082}
"""
EVERY_KIND = {  # each spec's whole set: (host, port, who binds it); a kind dropped from either builder is caught
    "upstream": (UPSTREAM, {("tb1", p, "deployment") for p in (9100, 9101, 9200, 9201, 30000, 30001, 31000, 31001,
                                                              12345, 12346, 8000)}
                 | {("tb1", 9300, "host"), ("tb1", 8082, "host")}),
    "upstream-mixed": (UPSTREAM_MIXED, {("tb1", p, "deployment") for p in (9100, 9200, 12345, 12346, 8000, 19000)}),
    "seed": (SEED, {("tb1", p, "deployment") for p in (9001, 9002, 8000, 19000)} | {("tb1", 9100, "host"),
                                                                          ("tb1", 8082, "host")}),
    "seed-pd": (SEED_PD, {("tb1", p, "deployment") for p in (9000, 9001, 9002)}),
    # platform gpu: no npu-exporter; triton's grpc and metrics ports, defaulted (port + 1, + 2) or written
    "triton": (TRITON, {("node1", p, "deployment") for p in (8000, 8001, 8002, 8100, 8111, 8112)}
               | {("node1", 9100, "host")}),
}


def _document_ports(text: str):
    import yaml

    from deployctl.spec.port_set import document_ports
    from deployctl.spec.rules import Context

    return document_ports(Context(yaml.safe_load(text), set()))


@pytest.mark.parametrize("name", list(EVERY_KIND))
def test_validate_and_the_plan_read_one_set_holding_every_kind_of_port(name):
    from deployctl.doctor.checks_ports import listen_ports
    from deployctl.spec.port_set import spec_ports

    text, expected = EVERY_KIND[name]
    spec = load_spec_text(text, environ={})
    assert {(u.host, u.port, u.owner) for u in _document_ports(text)} == expected
    assert {(u.host, u.port, u.owner) for u in spec_ports(spec)} == expected
    # doctor's free-port check and up's reservations: what the deployment's containers bind, not the exporters
    host = next(iter(expected))[0]
    assert {p for p, _ in listen_ports(spec, host)} == {p for h, p, owner in expected if owner == "deployment"}


def test_a_default_exporter_port_is_the_packs_assumption_not_a_collision():
    """monitor: without the exporter's port: the pack checks what listens there and skips a port a server binds
    (NOTES.txt); the playbook's groups serve on 9100, node_exporter's default."""
    text = (ROOT / "playbooks/vllm-ascend-pd-qwen3.yaml").read_text() + "monitor: {}\n"
    assert check_spec_text(text, "spec.yaml", environ={})[1] == []
    _, errors, _ = check_spec_text(text.replace("monitor: {}", "monitor: {node_exporter_port: 9100}"), "spec.yaml",
                                   environ={})
    assert [(e.dotted_path, e.message.split(" (")[0]) for e in errors] == [
        ("monitor.node_exporter_port", f"port 9100 on host {host}") for host in ("node1", "node2", "node3")]
    assert errors[0].message.endswith("already used by prefill group 0 API ports 9100-9101 "
                                      "(topology.prefill[0].port, line 45)")


@pytest.mark.parametrize("name", list(EVERY_KIND))
def test_the_ports_of_each_instance_are_the_deployments_set(name):
    """Instance.ports is the one list of what a unit binds (surge reservations, monitor, export and validate's table
    read it): over the instances it is the set the port checks read, kv and rpc ports of DP groups included."""
    text, expected = EVERY_KIND[name]
    spec = load_spec_text(text, environ={})
    assert {(i.host, p, "deployment") for i in spec.instances for _, p in i.ports} == {
        e for e in expected if e[2] == "deployment"}
