"""vllm-ascend launch derivation with plain data: ranks and device slices, DP flags, connector JSON, proxy lists."""

import json

from deployctl.plan.dp_launch import (
    data_parallel_args, host_env, kv_transfer_arg, kv_transfer_config, proxy_args, visible_devices,
)
from deployctl.spec.dp_groups import DpGroup, kv_ports, ranks_of, servers_of

ADDRESS = {"node1": "192.0.2.1", "node2": "192.0.2.2", "node3": "192.0.2.3"}
PREFILL = DpGroup("prefill", 0, ("node1",), dp=2, tp=8, port=9100, expert_parallel=True)
DECODE = DpGroup("decode", 1, ("node2", "node3"), dp=8, tp=4, port=9100, expert_parallel=True)


def test_ranks_spread_evenly_over_hosts_each_with_tp_consecutive_devices():
    ranks = ranks_of(DECODE, cards=16)
    assert [(r.host, r.rank, r.local, r.devices) for r in ranks[3:6]] == [
        ("node2", 3, 3, (12, 13, 14, 15)), ("node3", 4, 0, (0, 1, 2, 3)), ("node3", 5, 1, (4, 5, 6, 7))]
    assert len({(r.host, d) for r in ranks for d in r.devices}) == 8 * 4  # a device serves one rank
    limited = DpGroup("mixed", 0, ("node1",), dp=2, tp=2, port=8000, devices=(8, 9, 12, 13))
    assert [r.devices for r in ranks_of(limited, cards=16)] == [(8, 9), (12, 13)]


def test_external_launch_is_one_server_per_rank_with_its_own_api_and_kv_ports():
    servers = servers_of(DECODE, 16, "external")
    assert [(s.name, s.host, s.port, s.kv_port) for s in servers[2:6]] == [
        ("decode1-r2", "node2", 9102, 30100), ("decode1-r3", "node2", 9103, 30100),
        ("decode1-r4", "node3", 9100, 30100), ("decode1-r5", "node3", 9101, 30100)]
    # one base per group, as the tutorials write it; the connector offsets each rank by rank x tp itself
    assert kv_ports(DECODE, "node2") == tuple(range(30100, 30116))
    assert kv_ports(DECODE, "node3") == tuple(range(30116, 30132))
    r5 = servers[5]
    assert visible_devices(r5) == {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
    assert data_parallel_args(r5, ADDRESS) == (
        "--tensor-parallel-size", "4", "--data-parallel-size", "8", "--data-parallel-rank", "5",
        "--data-parallel-address", "192.0.2.2", "--data-parallel-rpc-port", "12346", "--enable-expert-parallel",
        "--port", "9101")


def test_internal_launch_is_one_server_per_host_the_later_ones_headless():
    group = DpGroup("mixed", 0, ("node1", "node2"), dp=4, tp=8, port=8000)
    first, second = servers_of(group, 16, "internal")
    assert (first.name, first.port, first.devices) == ("mixed0-node1", 8000, tuple(range(16)))
    assert data_parallel_args(first, ADDRESS) == (
        "--tensor-parallel-size", "8", "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-start-rank", "0", "--data-parallel-address", "192.0.2.1", "--data-parallel-rpc-port",
        "12345", "--port", "8000")
    assert second.headless and data_parallel_args(second, ADDRESS)[5:8] == ("2", "--data-parallel-start-rank", "2")
    assert data_parallel_args(second, ADDRESS)[-1] == "--headless" and "--port" not in data_parallel_args(second, ADDRESS)


def test_connector_config_carries_role_port_engine_and_both_sizes_and_round_trips():
    server = servers_of(DECODE, 16, "external")[5]
    config = kv_transfer_config(server, "qwen3", PREFILL, DECODE)
    assert config["kv_role"] == "kv_consumer" and config["kv_port"] == "30100"
    assert config["engine_id"] == "qwen3-decode1"
    assert config["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 8},
                                                   "decode": {"dp_size": 8, "tp_size": 4}}
    flag, word = kv_transfer_arg(config)
    assert flag == "--kv-transfer-config" and json.loads(word) == config and " " not in word
    producer = kv_transfer_config(servers_of(PREFILL, 16, "external")[0], "qwen3", PREFILL, DECODE)
    assert producer["kv_role"] == "kv_producer" and producer["engine_id"] != config["engine_id"]


def test_proxy_lists_every_api_server_in_group_host_rank_order():
    servers = servers_of(PREFILL, 16, "external") + servers_of(DECODE, 16, "external")
    args = proxy_args(servers, ADDRESS)
    assert args[:6] == ("--prefiller-hosts", "192.0.2.1", "192.0.2.1", "--prefiller-ports", "9100", "9101")
    hosts = args[args.index("--decoder-hosts") + 1:args.index("--decoder-ports")]
    ports = args[args.index("--decoder-ports") + 1:]
    assert hosts == ("192.0.2.2",) * 4 + ("192.0.2.3",) * 4 and ports == ("9100", "9101", "9102", "9103") * 2
    internal = servers_of(DpGroup("decode", 1, ("node2", "node3"), 8, 4, 9100), 16, "internal")
    assert proxy_args(internal, ADDRESS)[-4:] == ("--decoder-hosts", "192.0.2.2", "--decoder-ports", "9100")


def test_each_host_gets_its_own_address_and_nic_never_typed():
    assert host_env("192.0.2.2", "enp189s0f0") == {
        "HCCL_IF_IP": "192.0.2.2", "GLOO_SOCKET_IFNAME": "enp189s0f0", "TP_SOCKET_IFNAME": "enp189s0f0",
        "HCCL_SOCKET_IFNAME": "enp189s0f0"}
