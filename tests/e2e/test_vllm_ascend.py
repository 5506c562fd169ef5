"""server vllm-ascend on the test bed (issue 21): hosts with 16 emulated NPUs and a named NIC each; the stand-in
refuses a wrong rank, device slice, address, port, kv port or connector size, and its proxy routes prefill ->
decode, so a green `up` proves the derivation end to end.

Issue 29: the stand-in now refuses what the real vLLM + vllm-ascend refuse (images/standin/README.md), and the bed
holds one stand-in image per vllm-ascend release; these shapes run on more than one (`:latest` = v0.23.0, v0.11.0,
and vLLM 0.33 under v0.23.0 for the head-node rule that changed in vLLM 0.28). The old launch (host ids in
ASCEND_RT_VISIBLE_DEVICES, kv_connector_module_path vllm_ascend.distributed.mooncake_connector, no --shm-size,
kv ports from 30000 on 16-NPU hosts, `--entrypoint vllm`, a start rank on the internal head) fails at `up` here
with the stand-in's refusal, as a real deployment would."""

from __future__ import annotations

import pytest

from deployctl.facts.listening import parse_port_list
from tests.e2e.conftest import MODEL, container_ids, http_json
from tests.testbed import layout


V0_11 = layout.standin_image("v0.11.0")
NEWER_VLLM = "{STANDIN_VLLM_VERSION: '0.33.0'}"  # vLLM >= 0.28 under the newest vllm-ascend (standin/versions.py)


def spec(bed, name, topology, hosts, cards=16, image=layout.STANDIN_IMAGE):
    extra = f"server: vllm-ascend\nrequirements: {{cards: {cards}}}\n" + MODEL.replace(layout.STANDIN_IMAGE, image)
    return bed.spec_yaml(name, topology, hosts_used=hosts, extra=extra)


@pytest.fixture
def cards16(bed):
    """tb1-tb3 as A3-like hosts (16 NPUs) for one test."""
    for host in ("tb1", "tb2", "tb3"):
        bed.set_profile(host, cards=16)
    yield bed
    for host in ("tb1", "tb2", "tb3"):
        bed.reset_profile(host)


def nic_of(bed, host: str) -> str:
    """The interface that carries the host's address, as the host itself reports it."""
    address = bed.host(host).address
    for line in bed.run_on(host, ["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        words = line.split()
        if words[3].split("/")[0] == address:
            return words[1]
    raise AssertionError(f"{host}: no interface carries {address}")


PD_EXTERNAL = """topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: tb1, port: 8300}
  prefill:
    - {hosts: [tb1], dp: 2, tp: 8, expert_parallel: true, port: 9300}
  decode:
    - {hosts: [tb2, tb3], dp: DECODE_DP, tp: 4, expert_parallel: true, port: 9300, model: {max_num_seqs: SEQS}}
"""


def pd_spec(bed, dp=8, seqs=8, image=layout.STANDIN_IMAGE):
    topology = PD_EXTERNAL.replace("DECODE_DP", str(dp)).replace("SEQS", str(seqs))
    return spec(bed, "e2e-va-pd", topology, ["tb1", "tb2", "tb3"], image=image)


def test_pd_external_serves_through_the_proxy_reruns_nothing_and_replaces_only_what_changes(cards16, deployctl):
    bed = cards16
    path = deployctl.write(pd_spec(bed))
    bystander = deployctl.write(spec(bed, "e2e-va-other", MIXED_ONE_HOST.replace("tb1", "tb4"), ["tb4"], cards=8),
                                "other.yaml")
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert doc["endpoint"] == "http://10.200.0.11:8300" and doc["smoke"]["e2e-va-pd-proxy"]

        # every stand-in confirms what it was launched with
        decode = {(h, p): http_json(bed, h, p, "/standin/info") for h in ("tb2", "tb3") for p in range(9300, 9304)}
        assert sorted(r for info in decode.values() for r in info["dp_ranks"]) == list(range(8))
        r5 = decode[("tb3", 9301)]
        assert r5["dp_ranks"] == [5] and r5["devices"] == [4, 5, 6, 7]
        assert r5["ifname"] == nic_of(bed, "tb3") == layout.nic_name(3) == "enp63s0f0"  # each host its own NIC
        # 16-NPU hosts: the default kv_port base sits above Mooncake's random range 20000-35999
        assert r5["hccl_if_ip"] == "10.200.0.13" and r5["kv_port"] == 36100
        # ...and inside the kernel's ephemeral range, so `up` reserved them there: no rank's connection to its DP
        # master takes one as its own port before the rank binds it (plan/reserve_ports.py)
        reserved = bed.run_on("tb3", ["cat", "/proc/sys/net/ipv4/ip_local_reserved_ports"]).stdout
        assert set(range(36116, 36132)) <= parse_port_list(reserved)
        assert r5["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 8},
                                                   "decode": {"dp_size": 8, "tp_size": 4}}
        prefill = http_json(bed, "tb1", 9301, "/standin/info")
        assert prefill["role"] == "prefill" and prefill["dp_ranks"] == [1] and prefill["devices"] == list(range(8, 16))
        assert prefill["ifname"] == "enp61s0f0" and prefill["hccl_if_ip"] == "10.200.0.11"
        # v0.23.0's proxy counts its requests in flight too (standin/proxy_pool.py)
        assert http_json(bed, "tb1", 8300, "/healthcheck") == {"status": "ok", "prefill_instances": 2,
                                                               "decode_instances": 8, "request_num": 0}
        # bench goes end to end through the proxy: prefill, then decode with the prefill's kv_transfer_params
        code, doc = deployctl.json("bench", "static", path, "--parallel-num", "2", "--prompt-tokens", "20",
                                   "--output-tokens", "4", "--epochs", "2", "--warmup", "0",
                                   "--result-dir", str(deployctl.tmp_path / "bench"))
        assert code == 0, doc
        assert [(r["requests"], r["succeeded"], r["failed"]) for r in doc["runs"]] == [(4, 4, 0)]
        assert doc["runs"][0]["total_output_tokens"] == 16
        before = {h: container_ids(bed, h, "e2e-va-pd") for h in ("tb1", "tb2", "tb3")}
        assert len(before["tb1"]) == 3 and len(before["tb2"]) == len(before["tb3"]) == 4

        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
        assert {h: container_ids(bed, h, "e2e-va-pd") for h in before} == before

        # a decode-only setting: only the decode ranks are replaced
        deployctl.write(pd_spec(bed, seqs=12))
        code, doc = deployctl.json("plan", path, "--skip", "weights")
        changed = {s["container"] for s in doc["steps"] if s["action"] in ("create", "replace") and "container" in s}
        assert changed == {f"e2e-va-pd-decode0-r{r}" for r in range(8)}

        # a changed decode dp: the decode ranks, the proxy's lists and the prefill's connector sizes all change;
        # ranks 4-7 are retired
        deployctl.write(pd_spec(bed, dp=4, seqs=12))
        code, doc = deployctl.json("up", path, "--skip", "weights", "--yes")
        assert code == 0, doc
        after = {h: container_ids(bed, h, "e2e-va-pd") for h in ("tb1", "tb2", "tb3")}
        assert sorted(after["tb2"]) == ["e2e-va-pd-decode0-r0", "e2e-va-pd-decode0-r1"]
        assert sorted(after["tb3"]) == ["e2e-va-pd-decode0-r2", "e2e-va-pd-decode0-r3"]
        assert http_json(bed, "tb1", 9300, "/standin/info")["kv_connector_extra_config"]["decode"] == {
            "dp_size": 4, "tp_size": 4}
        assert http_json(bed, "tb1", 8300, "/healthcheck")["decode_instances"] == 4

        code, doc = deployctl.json("up", bystander, "--skip", "weights")
        assert code == 0, doc
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert all(container_ids(bed, h, "e2e-va-pd") == {} for h in ("tb1", "tb2", "tb3"))
        assert len(container_ids(bed, "tb4", "e2e-va-other")) == 1  # down left the other deployment alone
    finally:
        for spec_path in (path, bystander):  # whatever failed above, both are gone for the next test
            code, out, err = deployctl("down", spec_path, "--yes")
            assert code == 0, err


def test_pd_external_serves_through_the_proxy_on_the_v0_11_release(cards16, deployctl):
    bed = cards16
    path = deployctl.write(pd_spec(bed, dp=4, image=V0_11))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert doc["smoke"]["e2e-va-pd-proxy"]
        prefill = http_json(bed, "tb1", 9300, "/standin/info")
        assert (prefill["vllm_ascend_version"], prefill["vllm_version"]) == ("v0.11.0", "0.11.0")
        assert http_json(bed, "tb1", 8300, "/healthcheck") == {"status": "ok", "prefill_instances": 2,
                                                               "decode_instances": 4}
    finally:
        assert deployctl("down", path, "--yes")[0] == 0


EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def test_pd_ranks_start_where_the_ephemeral_range_covers_their_kv_ports(cards16, deployctl):
    """Each decode host's outgoing connections (a rank's to its DP master among them) draw their own ports from
    32 ports, half of them kv ports: unreserved, some rank's bind meets one of them now and then ("kv port N in
    use"); `up` reserves them first, so every rank starts, every time."""
    bed = cards16
    path = deployctl.write(pd_spec(bed))
    hosts = ("tb2", "tb3")
    before = {h: bed.run_on(h, ["cat", EPHEMERAL]).stdout.split() for h in hosts}
    try:
        for h in hosts:
            bed.run_on(h, ["sh", "-c", f'echo "36100 36131" > {EPHEMERAL}; echo > {RESERVED}'])
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert parse_port_list(bed.run_on("tb2", ["cat", RESERVED]).stdout) == set(range(36100, 36116))
        assert parse_port_list(bed.run_on("tb3", ["cat", RESERVED]).stdout) == set(range(36116, 36132))
        decode = [http_json(bed, h, p, "/standin/info") for h in hosts for p in range(9300, 9304)]
        assert sorted(r for info in decode for r in info["dp_ranks"]) == list(range(8))
    finally:
        for h in hosts:
            bed.run_on(h, ["sh", "-c", f'echo "{" ".join(before[h])}" > {EPHEMERAL}'])
        assert deployctl("down", path, "--yes")[0] == 0


MIXED_ONE_HOST = """topology:
  mode: mixed
  groups:
    - {hosts: [tb1], dp: 4, tp: 2, expert_parallel: true, port: 8310}
"""


def test_mixed_one_host_dp_with_expert_parallel_serves(cards16, deployctl):
    bed = cards16
    path = deployctl.write(spec(bed, "e2e-va-mixed", MIXED_ONE_HOST.replace("tp: 2", "tp: 4"), ["tb1"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert doc["smoke"]["e2e-va-mixed-mixed0-tb1"]
        info = http_json(bed, "tb1", 8310, "/standin/info")
        assert info["dp_ranks"] == [0, 1, 2, 3] and info["devices"] == list(range(16)) and info["expert_parallel"]
        before = container_ids(bed, "tb1", "e2e-va-mixed")

        # a group env that hides devices from the server (or names host ids): refused before anything changes,
        # since the container's own NPUs are 0..n-1 (contract: "Settled on 2026-11-25"); what ran before serves on
        broken = MIXED_ONE_HOST.replace("tp: 2", "tp: 4").replace(
            "port: 8310}", "port: 8310, env: {ASCEND_RT_VISIBLE_DEVICES: '0,1'}}")
        deployctl.write(spec(bed, "e2e-va-mixed", broken, ["tb1"]))
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 2 and "ASCEND_RT_VISIBLE_DEVICES=0,1 but each container of mixed group 0 mounts exactly " \
                             "its own 16 NPU(s)" in err
        assert container_ids(bed, "tb1", "e2e-va-mixed") == before
        assert http_json(bed, "tb1", 8310, "/standin/info")["devices"] == list(range(16))
        deployctl.write(spec(bed, "e2e-va-mixed", MIXED_ONE_HOST.replace("tp: 2", "tp: 4"), ["tb1"]))  # for down
    finally:
        assert deployctl("down", path, "--yes")[0] == 0


MIXED_TWO_HOSTS = """topology:
  mode: mixed
  dp_launch: internal
  groups:
    - {hosts: [tb2, tb3], dp: 4, tp: 8, port: 8320}
"""


@pytest.mark.parametrize("image, group_env", [
    (layout.STANDIN_IMAGE, ""),
    (V0_11, ""),
    (layout.STANDIN_IMAGE, ", env: " + NEWER_VLLM),  # from vLLM 0.28 a start rank on the head means hybrid LB
], ids=["v0.23.0", "v0.11.0", "v0.23.0-vllm0.33"])
def test_mixed_two_hosts_internal_launch_runs_the_second_headless(cards16, deployctl, image, group_env):
    bed = cards16
    topology = MIXED_TWO_HOSTS.replace("port: 8320}", f"port: 8320{group_env}}}")
    path = deployctl.write(spec(bed, "e2e-va-int", topology, ["tb2", "tb3"], image=image))
    try:
        code, doc = deployctl.json("plan", path, "--skip", "weights")
        assert code == 0, doc
        argv = next(s["argv"] for s in doc["steps"] if s.get("container") == "e2e-va-int-mixed0-tb3"
                    and s["stage"] == "workers")
        assert "--headless" in argv and argv[argv.index("--data-parallel-address") + 1] == "10.200.0.12"
        assert argv[argv.index("--data-parallel-start-rank") + 1] == "2" and "--entrypoint" not in argv
        head = next(s["argv"] for s in doc["steps"] if s.get("container") == "e2e-va-int-mixed0-tb2"
                    and s["stage"] == "workers")
        assert "--data-parallel-start-rank" not in head and "--shm-size" in head  # the head: no start rank

        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        info = http_json(bed, "tb2", 8320, "/standin/info")
        assert info["dp_ranks"] == [0, 1, 2, 3] and info["dp"] == 4 and not info["hybrid_lb"]
        status = {row["name"]: row for row in deployctl.json("status", path)[1]["instances"]}
        assert status["e2e-va-int-mixed0-tb2"]["healthy"] and status["e2e-va-int-mixed0-tb3"]["state"] == "running"
        assert status["e2e-va-int-mixed0-tb3"]["port"] is None
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
