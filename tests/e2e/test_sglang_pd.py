"""server sglang's P/D on the test bed (issue 43): two prefill and two decode servers (the stand-in playing SGLang
0.5.23's --disaggregation-mode, images/standin/standin/sglang_pd.py) behind the real sglang-router 0.3.2 in its P/D
mode, on a fake 4-GPU host."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.test_gpu import (ADDRESS, GPU, HOST, answered_through, as_gpu_host, host_curl, router_workers,
                                started_at, status_pack_rerun_and_drain, watch_after_a_hang)
from tests.monitor.conftest import prometheus_tools  # noqa: F401 (the fixture)

TESTBED_GROUP = "testbed2"  # the second bed, beside the first (tests/conftest.py)

NAME = "e2e-sglang-pd"
FRONT = 8474
# Requests of 16 tokens 100 ms apart (about 1.6 s) through the drain rollout
TOPOLOGY = """env: {STANDIN_TPOT_MS: '100', STANDIN_STARTUP_S: '0.5'}
topology:
  mode: disaggregated
  front: {kind: sglang-router, host: tb4, port: 8474, metrics_port: 8479, image: "%s", policy: round_robin}
  prefill:
    - {host: tb4, devices: [0], port: 8470}
    - {host: tb4, devices: [1], port: 8472, bootstrap_port: 8478}
  decode:
    - {host: tb4, devices: [2], port: 8475}
    - {host: tb4, devices: [3], port: 8476}
"""
PREFILLS = (f"{NAME}-prefill-0", f"{NAME}-prefill-1")
DECODES = (f"{NAME}-decode-0", f"{NAME}-decode-1")
SERVERS = PREFILLS + DECODES
WORKERS = {f"{ADDRESS}:8470": "prefill", f"{ADDRESS}:8472": "prefill", f"{ADDRESS}:8475": "decode",
           f"{ADDRESS}:8476": "decode"}


@pytest.fixture(scope="module")
def pd_host(bed):
    """tb4 as a 4-GPU host, for this module only."""
    with as_gpu_host(bed, 4):
        yield bed


def pd_spec(bed, deployctl, max_num_seqs: int, monitor: str = "") -> str:
    from tests.testbed import sglang_router_image

    model = monitor + (f"image: {{name: deployctl/standin-vllm:latest}}\nweights: {{dest: /srv/weights/tiny}}\n"
                       f"model: {{served_name: tiny, max_model_len: 2048, max_num_seqs: {max_num_seqs}, "
                       "max_num_batched_tokens: 2048}\n")
    text = bed.spec_yaml(NAME, TOPOLOGY % sglang_router_image.IMAGE, hosts_used=[HOST],
                         extra=model + GPU.replace("cards: 2", "cards: 4") + "server: sglang\n")
    return deployctl.write(text, name=f"{NAME}-{max_num_seqs}.yaml")


def test_sglang_pd_behind_the_router_up_answers_rerun_status_monitor_drain_rollout_watch_and_down(
        pd_host, deployctl, prometheus_tools, tmp_path):  # noqa: F811
    """up asks every prefill x decode pair as the router does and the router itself; the router runs its P/D mode
    with each prefill's bootstrap port; a no-op re-run; status; the pack's panels from SGLang's names; a drain
    rollout (two waves of one prefill and one decode) under steady streaming load fails no request and puts each
    server back with its type; watch restarts a hung decode and puts it back; down."""
    from tests.e2e.test_monitor import monitor_key
    from tests.ports import free_port

    bed = pd_host
    pack, blackbox_port = tmp_path / "pack", free_port()
    monitor = monitor_key(pack, blackbox_port)
    path = pd_spec(bed, deployctl, 4, monitor)
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is True, doc
        assert doc["endpoint"] == f"http://{ADDRESS}:{FRONT}"
        assert [(i["name"], i["healthy"]) for i in doc["instances"]] == [(s, True) for s in SERVERS] + [
            (f"{NAME}-router", True)]
        inspect = {i["Name"].lstrip("/"): i for i in json.loads(bed.docker_on(HOST, "inspect", *SERVERS,
                                                                              f"{NAME}-router").stdout)}
        args = {name: inspect[name]["Args"] for name in SERVERS}
        assert args[PREFILLS[1]][-6:] == ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port",
                                          "8478", "--disaggregation-transfer-backend", "mooncake"]
        assert args[DECODES[0]][-4:] == ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend",
                                         "mooncake"]
        router = inspect[f"{NAME}-router"]["Args"]
        assert router[router.index("--pd-disaggregation"):router.index("--policy")] == [
            "--pd-disaggregation", "--prefill", f"http://{ADDRESS}:8470", "8471", "--prefill",
            f"http://{ADDRESS}:8472", "8478", "--decode", f"http://{ADDRESS}:8475", "--decode",
            f"http://{ADDRESS}:8476"]
        assert router_workers(bed, path) == WORKERS
        # a P/D server alone refuses a request without a bootstrap room: the router's is the way in
        alone = host_curl(bed, "--data", '{"model": "tiny", "prompt": "hi", "max_tokens": 2}', "-H",
                          "Content-Type: application/json", "http://127.0.0.1:8475/v1/completions").stdout
        assert "without bootstrap room id" in json.loads(alone)["message"]
        # status, the pack, a no-op re-run, then a drain rollout (two waves of one prefill and one decode)
        changed = pd_spec(bed, deployctl, 8, monitor)
        status_pack_rerun_and_drain(bed, deployctl, (path, changed), NAME, SERVERS, f"http://{ADDRESS}:{FRONT}",
                                    (pack, blackbox_port), WORKERS)

        # watch: a decode's engine hangs (/health stays 200, /health_generate never answers): restarted, put back
        started = started_at(bed, SERVERS)
        actions = watch_after_a_hang(bed, deployctl, changed, 8476)
        assert [(a["containers"], a["result"]) for a in actions] == [
            ([DECODES[1]], "restarting"), ([DECODES[1]], "ok")], actions
        now = started_at(bed, SERVERS)
        assert [s for s in SERVERS if now[s] != started[s]] == [DECODES[1]]
        assert router_workers(bed, changed) == WORKERS  # put back as a decode
        answered_through(bed, FRONT)  # each prefill and decode in turn
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}


ASCEND_NAME = "e2e-sglang-npu"
# Ascend hosts tb2 (the prefill, the router) and tb3 (the decode): SGLang's NPU launch on the bed's fake NPUs
ASCEND_TOPOLOGY = """env: {STANDIN_TPOT_MS: '20', STANDIN_STARTUP_S: '0.5'}
topology:
  mode: disaggregated
  front: {kind: sglang-router, host: tb2, port: 8484, metrics_port: 8489, image: "%s"}
  prefill:
    - {host: tb2, devices: [0, 1], port: 8480}
  decode:
    - {host: tb3, devices: [4, 5, 6, 7], port: 8482}
"""


def test_sglang_pd_on_ascend_hosts_runs_the_npu_launch_on_their_npus_and_every_path_answers(bed, deployctl):
    """platform ascend: each server's `--device npu --attention-backend ascend` with the ascend transfer backend and
    the one MemFabric store (the prefill's host), its own /dev/davinci* only; a TP-2 prefill beside a TP-4 decode
    on another host; up asks the pair and the router; status; down."""
    from tests.testbed import sglang_router_image

    model = ("image: {name: deployctl/standin-vllm:latest}\nweights: {dest: /srv/weights/tiny}\n"
             "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 4}\nserver: sglang\n"
             "requirements: {driver: '23.0.6', cards: 8, free_disk_gb: 1}\n")
    path = deployctl.write(bed.spec_yaml(ASCEND_NAME, ASCEND_TOPOLOGY % sglang_router_image.IMAGE,
                                         hosts_used=["tb2", "tb3"], extra=model), name=f"{ASCEND_NAME}.yaml")
    prefill, decode = f"{ASCEND_NAME}-prefill-0", f"{ASCEND_NAME}-decode-0"
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")  # its answer check asks the pair and the router
        assert code == 0 and doc["endpoint"] == "http://10.200.0.12:8484", doc
        for host, name, npus in (("tb2", prefill, ["/dev/davinci0", "/dev/davinci1"]),
                                 ("tb3", decode, [f"/dev/davinci{n}" for n in (4, 5, 6, 7)])):
            (inspect,) = json.loads(bed.docker_on(host, "inspect", name).stdout)
            assert inspect["Args"][-4:] == ["--device", "npu", "--attention-backend", "ascend"]
            assert inspect["Args"][inspect["Args"].index("--disaggregation-transfer-backend") + 1] == "ascend"
            mapped = [d["PathOnHost"] for d in inspect["HostConfig"]["Devices"]]
            assert [d for d in mapped if d[len("/dev/davinci"):].isdigit()] == npus
            assert "ASCEND_MF_STORE_URL=tcp://10.200.0.12:24669" in inspect["Config"]["Env"]
        code, status = deployctl.json("status", path)
        assert code == 0 and all(i["healthy"] for i in status["instances"]), status
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, "tb2", ASCEND_NAME) == {} and container_ids(bed, "tb3", ASCEND_NAME) == {}


MULTI_NAME = "e2e-sglang-2n"
# One server over tb2 and tb3 (node 0 serves the API on tb2, node 1 runs headless on tb3): SGLang's multi-node launch
MULTI_TOPOLOGY = """env: {STANDIN_TPOT_MS: '20', STANDIN_STARTUP_S: '0.5'}
topology:
  mode: mixed
  instances:
    - {hosts: [tb2, tb3], devices: [2, 3], port: 8490}
"""


def test_one_sglang_server_over_two_hosts_starts_both_nodes_replaces_them_together_and_stops_both(bed, deployctl):
    """`hosts` on an instance: each node runs the same launch with its --node-rank, meeting at the first host's
    address; only node 0 serves the API (the stand-in's node 1 listens on nothing, as SGLang's does); a changed
    max_num_seqs replaces both nodes; down removes both."""
    def spec(seqs: int) -> str:
        model = ("image: {name: deployctl/standin-vllm:latest}\nweights: {dest: /srv/weights/tiny}\n"
                 f"model: {{served_name: tiny, max_model_len: 2048, max_num_seqs: {seqs}}}\nserver: sglang\n"
                 "requirements: {driver: '23.0.6', cards: 8, free_disk_gb: 1}\n")
        return deployctl.write(bed.spec_yaml(MULTI_NAME, MULTI_TOPOLOGY, hosts_used=["tb2", "tb3"], extra=model),
                               name=f"{MULTI_NAME}-{seqs}.yaml")

    first, second = f"{MULTI_NAME}-mixed-0", f"{MULTI_NAME}-mixed-0-node1"
    path = spec(4)
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["endpoint"] == "http://10.200.0.12:8490", doc
        (zero,) = json.loads(bed.docker_on("tb2", "inspect", first).stdout)
        (one,) = json.loads(bed.docker_on("tb3", "inspect", second).stdout)
        for inspect, rank in ((zero, "0"), (one, "1")):
            args = inspect["Args"]
            assert args[args.index("--nnodes") + 1:args.index("--nnodes") + 6] == [
                "2", "--node-rank", rank, "--dist-init-addr", "10.200.0.12:8492"]
            assert inspect["State"]["Running"], inspect["State"]
        assert "--port" not in one["Args"]
        assert "node rank 1 of 2" in bed.docker_on("tb3", "logs", second).stdout
        before = {**container_ids(bed, "tb2", MULTI_NAME), **container_ids(bed, "tb3", MULTI_NAME)}
        code, doc = deployctl.json("up", spec(8), "--yes", "--skip", "weights")
        assert code == 0, doc
        after = {**container_ids(bed, "tb2", MULTI_NAME), **container_ids(bed, "tb3", MULTI_NAME)}
        assert set(after) == {first, second} and all(after[n] != before[n] for n in after)
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, "tb2", MULTI_NAME) == {} and container_ids(bed, "tb3", MULTI_NAME) == {}
