"""vllm-ascend launch derivation with plain data: ranks and device slices, DP flags, connector JSON, proxy lists."""

import json

import subprocess

from deployctl.servers.vllm_ascend.dp_launch import (
    data_parallel_args, host_env, kv_transfer_arg, kv_transfer_config, launch_command, profile_flags, proxy_args,
)
from deployctl.servers.vllm_ascend.groups import DpGroup, connector_port_range, default_kv_port, kv_ports, ranks_of, servers_of
from deployctl.spec.profiles import profiles

ADDRESS = {"node1": "192.0.2.1", "node2": "192.0.2.2", "node3": "192.0.2.3"}
PREFILL = DpGroup("prefill", 0, ("node1",), dp=2, tp=8, port=9100, expert_parallel=True)
DECODE = DpGroup("decode", 1, ("node2", "node3"), dp=8, tp=4, port=9100, expert_parallel=True,
                 kv_port_default=default_kv_port(16))


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
        ("decode1-r2", "node2", 9102, 36100), ("decode1-r3", "node2", 9103, 36100),
        ("decode1-r4", "node3", 9100, 36100), ("decode1-r5", "node3", 9101, 36100)]
    # one base per group, as the tutorials write it; the connector offsets each rank by rank x tp itself
    assert kv_ports(DECODE, "node2") == tuple(range(36100, 36116))
    assert kv_ports(DECODE, "node3") == tuple(range(36116, 36132))
    r5 = servers[5]
    assert data_parallel_args(r5, ADDRESS) == (
        "--tensor-parallel-size", "4", "--data-parallel-size", "8", "--data-parallel-rank", "5",
        "--data-parallel-address", "192.0.2.2", "--data-parallel-rpc-port", "12346", "--enable-expert-parallel",
        "--port", "9101")


def test_internal_launch_is_one_server_per_host_the_later_ones_headless():
    group = DpGroup("mixed", 0, ("node1", "node2"), dp=4, tp=8, port=8000)
    first, second = servers_of(group, 16, "internal")
    assert (first.name, first.port, first.devices) == ("mixed0-node1", 8000, tuple(range(16)))
    # the head: its local size, address and rpc port, no start rank (vLLM >= 0.28 reads one as hybrid LB)
    assert data_parallel_args(first, ADDRESS) == (
        "--tensor-parallel-size", "8", "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-address", "192.0.2.1", "--data-parallel-rpc-port", "12345", "--port", "8000")
    assert second.headless and data_parallel_args(second, ADDRESS)[5:8] == ("2", "--data-parallel-start-rank", "2")
    assert data_parallel_args(second, ADDRESS)[-1] == "--headless" and "--port" not in data_parallel_args(second, ADDRESS)


def test_connector_config_carries_role_port_engine_and_both_sizes_and_round_trips():
    server = servers_of(DECODE, 16, "external")[5]
    config = kv_transfer_config(server, "qwen3", PREFILL, DECODE)
    assert config["kv_role"] == "kv_consumer" and config["kv_port"] == "36100"
    assert "kv_connector_module_path" not in config  # registered by vllm-ascend; vLLM #38301 imports it first
    assert kv_transfer_config(server, "qwen3", PREFILL, DECODE, module_path="some.module")[
        "kv_connector_module_path"] == "some.module"  # only where a profile needs one
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


def test_default_kv_port_sits_just_above_the_connectors_random_range():
    assert connector_port_range(16) == (20000, 36000) and default_kv_port(16) == 36000
    assert connector_port_range(8) == (20000, 28000) and default_kv_port(8) == 28000
    assert default_kv_port(2) == 28000  # never below the 8-NPU range
    plain = DpGroup("mixed", 2, ("node1",), dp=1, tp=1, port=8000)
    assert plain.kv_port_base == 28200 and DpGroup("mixed", 2, ("node1",), 1, 1, 8000, kv_port=30000).kv_port_base == 30000


def test_profile_flags_are_defaults_the_user_replaces_by_writing_the_same_setting():
    current = profiles()[-1]
    assert profile_flags(current, "decode", ()) == (
        "--no-enable-prefix-caching", "--compilation-config", '{"cudagraph_mode":"FULL_DECODE_ONLY"}')
    assert profile_flags(current, "prefill", ()) == ("--no-enable-prefix-caching",)
    assert profile_flags(current, "mixed", ()) == ()
    assert profile_flags(current, "decode", ("--enable-prefix-caching", "--enforce-eager")) == ()
    assert profile_flags(current, "decode", ("--compilation-config", "{}")) == ("--no-enable-prefix-caching",)
    assert profile_flags(current, "decode", ("-O3",)) == ("--no-enable-prefix-caching",)
    assert profile_flags(profiles()[0], "decode", ()) == ("--no-enable-prefix-caching",)  # v0.11: torchair graphs


def test_launch_sources_the_images_set_up_puts_the_profiles_libraries_first_and_keeps_every_argument(tmp_path):
    """Run for real with sh: set_env.sh files that exist are sourced (and cannot eat the arguments), missing
    ones are skipped, LD_LIBRARY_PATH gets the profile's paths before the image's."""
    setup = tmp_path / "set_env.sh"
    setup.write_text('export FROM_SET_ENV=yes\nshift 2>/dev/null; set -- eaten\n')
    profile = profiles()[-1]
    from dataclasses import replace

    profile = replace(profile, set_env=(str(setup), str(tmp_path / "missing.sh")), library_path=("/opt/mc", "/l"))
    argv = launch_command(profile, ("sh", "-c", 'echo "$FROM_SET_ENV|$LD_LIBRARY_PATH|$*"', "x", "a b", "c"))
    assert argv[:2] == ("sh", "-c") and argv[4:] == ("sh", "-c", 'echo "$FROM_SET_ENV|$LD_LIBRARY_PATH|$*"', "x",
                                                     "a b", "c")
    out = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/img"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "yes|/opt/mc:/l:/img|a b c"
    plain = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert plain.stdout.strip() == "yes|/opt/mc:/l|a b c"


def test_launch_preloads_the_first_jemalloc_the_image_has_as_its_bashrc_would(tmp_path):
    """The images put jemalloc in LD_PRELOAD through ~/.bashrc only (v0.23.0:Dockerfile.a3:77; openEuler:
    /usr/lib64, Dockerfile.a3.openEuler:72), which a non-interactive start never reads (vllm-ascend #12059):
    the launch carries it, the path that exists in this image first, before any the user set."""
    missing, present = tmp_path / "lib" / "libjemalloc.so.2", tmp_path / "lib64" / "libjemalloc.so.2"
    present.parent.mkdir()
    present.write_bytes(b"")  # only tested with -f; the echo below never loads it
    argv = launch_command(profiles()[-1], ("sh", "-c", 'echo "$LD_PRELOAD"'), (str(missing), str(present)))
    out = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(present)
    kept = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": "/u.so"})
    assert kept.stdout.strip() == f"{present}:/u.so"
    none = launch_command(profiles()[-1], ("sh", "-c", 'echo "[$LD_PRELOAD]"'), (str(missing),))
    assert subprocess.run(none, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip() == "[]"
