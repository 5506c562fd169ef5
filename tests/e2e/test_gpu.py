"""GPU hosts on the test bed: Triton (vLLM backend), plain vLLM and SGLang behind sglang-router deploy on a fake NVIDIA
host; doctor's GPU checks."""

from __future__ import annotations

import contextlib
import json

import pytest

from tests.e2e.conftest import MODEL, container_ids
from tests.monitor.conftest import prometheus_tools  # noqa: F401 (the fixture)

TESTBED_GROUP = "testbed2"  # the second bed, beside the first (tests/conftest.py)

HOST = "tb4"
ADDRESS = "10.200.0.14"
GPU = ("platform: gpu\n"
       "requirements: {driver: '550.54.15', cards: 2, gpu_memory_gb: 80, ip_forward: true, free_disk_gb: 1}\n")


def mixed(devices: str, port: int) -> str:
    return f"topology:\n  mode: mixed\n  instances:\n    - {{host: {HOST}, devices: [{devices}], port: {port}}}\n"


def write_spec(bed, deployctl, name, topology, server="triton"):
    extra = MODEL + GPU + f"server: {server}\n"
    return deployctl.write(bed.spec_yaml(name, topology, hosts_used=[HOST], extra=extra), name=f"{name}.yaml")


@contextlib.contextmanager
def as_gpu_host(bed, gpus: int):
    """tb4 as a host of `gpus` x H100 with the NVIDIA runtime; an Ascend host again after."""
    bed.set_gpu_profile(HOST, gpus=gpus)
    try:
        yield bed
    finally:
        bed.reset_gpu(HOST)


@pytest.fixture(scope="module")
def gpu_host(bed):
    """tb4 as a 2-GPU host, for this module only."""
    with as_gpu_host(bed, 2):
        yield bed


def host_curl(bed, *argv):
    return bed.run_on(HOST, ["curl", "--silent", "--max-time", "5", *argv], check=False)


def test_fake_nvidia_smi_and_gpus_flag_on_the_host(gpu_host):
    out = gpu_host.run_on(HOST, ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"])
    assert out.stdout == "0, NVIDIA H100 80GB HBM3, 81559 MiB\n1, NVIDIA H100 80GB HBM3, 81559 MiB\n"
    runtimes = gpu_host.docker_on(HOST, "info", "--format", "{{json .Runtimes}}").stdout
    assert "nvidia" in json.loads(runtimes)
    run = gpu_host.docker_on(HOST, "run", "--rm", "--gpus", "device=1", gpu_host.base_image, "sh", "-c",
                             "echo $NVIDIA_VISIBLE_DEVICES")
    assert run.stdout == "1\n"


def test_triton_serves_rerun_is_noop_and_down_removes_it(gpu_host, deployctl):
    bed = gpu_host
    path = write_spec(bed, deployctl, "e2e-triton", mixed("0", 8480))
    repo = "/var/lib/deployctl/e2e-triton/triton"
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is True
        assert doc["endpoint"] == f"http://{ADDRESS}:8480"
        assert doc["smoke"]["e2e-triton-mixed-0"].startswith("Say hello in one short sentence. ")
        assert [(i["name"], i["state"], i["healthy"]) for i in doc["instances"]] == [
            ("e2e-triton-mixed-0", "running", True)]
        code, status = deployctl.json("status", path)
        assert code == 0
        assert [(i["name"], i["state"], i["healthy"]) for i in status["instances"]] == [
            ("e2e-triton-mixed-0", "running", True)]  # Triton answers /v2/health/ready, not vLLM's /health
        model_json = json.loads(bed.run_on(HOST, ["cat", f"{repo}/tiny/1/model.json"]).stdout)
        assert model_json == {"model": "/srv/weights/tiny", "tensor_parallel_size": 1, "max_model_len": 2048,
                              "max_num_seqs": 16, "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.9}
        inspect = json.loads(bed.docker_on(HOST, "inspect", "e2e-triton-mixed-0").stdout)[0]
        assert inspect["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0"]
        assert f"{repo}:{repo}:ro" in inspect["HostConfig"]["Binds"]
        assert host_curl(bed, "--output", "/dev/null", "--write-out", "%{http_code}",
                         "http://127.0.0.1:8480/v2/models/tiny/ready").stdout == "200"
        assert host_curl(bed, "http://127.0.0.1:8482/metrics").stdout.startswith("nv_inference_request_success")
        before = container_ids(bed, HOST, "e2e-triton")

        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
        assert container_ids(bed, HOST, "e2e-triton") == before
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, "e2e-triton") == {}


def test_plain_vllm_on_gpu_deploys(gpu_host, deployctl):
    bed = gpu_host
    path = write_spec(bed, deployctl, "e2e-gpu-vllm", mixed("0, 1", 8490), server="vllm")
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is True
        assert doc["smoke"]["e2e-gpu-vllm-mixed-0"]
        inspect = json.loads(bed.docker_on(HOST, "inspect", "e2e-gpu-vllm-mixed-0").stdout)[0]
        assert inspect["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0", "1"]
        assert inspect["Args"][inspect["Args"].index("--tensor-parallel-size") + 1] == "2"
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, "e2e-gpu-vllm") == {}


SGLANG = "e2e-sglang"
# Requests that last about 1.6 s (16 tokens 100 ms apart) through the drain rollout; the watch's saturation sends
# 60-token ones (6 s) beyond max_num_seqs at once, so they queue
SGLANG_TOPOLOGY = """env: {STANDIN_TPOT_MS: '100', STANDIN_STARTUP_S: '0.5'}
topology:
  mode: mixed
  front: {kind: sglang-router, host: tb4, port: 8464, metrics_port: 8467, image: "%s", policy: round_robin}
  instances:
    - {host: tb4, devices: [0], port: 8465}
    - {host: tb4, devices: [1], port: 8466}
"""
SGLANG_SERVERS = (f"{SGLANG}-mixed-0", f"{SGLANG}-mixed-1")


def sglang_spec(bed, deployctl, max_num_seqs: int, monitor: str = ""):
    from tests.testbed import sglang_router_image

    model = monitor + (f"image: {{name: deployctl/standin-vllm:latest}}\nweights: {{dest: /srv/weights/tiny}}\n"
             f"model: {{served_name: tiny, max_model_len: 2048, max_num_seqs: {max_num_seqs}, "
             f"max_num_batched_tokens: 2048}}\n")
    text = bed.spec_yaml(SGLANG, SGLANG_TOPOLOGY % sglang_router_image.IMAGE, hosts_used=[HOST],
                         extra=model + GPU + "server: sglang\n")
    return deployctl.write(text, name=f"{SGLANG}-{max_num_seqs}.yaml")


def router_workers(bed, path) -> dict:
    """The router's list, asked and read as deployctl's front_list probe does: address:port -> role."""
    from deployctl.plan.front import front_of, list_command, parse_roles
    from deployctl.spec.load import load_spec

    front = front_of(load_spec(path, unresolved_env="allow"))
    return parse_roles(front.kind, bed.run_on(HOST, list(list_command(front).argv)).stdout)


def test_sglang_behind_sglang_router_up_rerun_status_monitor_drain_rollout_watch_and_down(
        gpu_host, deployctl, prometheus_tools, tmp_path):  # noqa: F811
    """server sglang (issue 43) behind the real sglang-router 0.3.2 (tests/testbed/sglang_router_image.py), the
    stand-in playing SGLang's launch_server (its own option list, /health and /health_generate, sglang: metrics,
    its SIGTERM drain): up and its answer check through every path, a no-op re-run, status; a real Prometheus on
    its monitoring pack finds every target up and series for every panel (SGLang's metric names); a drain rollout
    under a steady streaming load through the router fails no request; watch: saturation restarts nothing, a hung
    server is restarted and put back into the router; down."""
    from tests.e2e.test_monitor import monitor_key
    from tests.e2e.test_watch import load, watch_once
    from tests.ports import free_port
    from tests.testbed import sglang_router_image

    bed = gpu_host
    if sglang_router_image.IMAGE not in bed.docker_on(HOST, "images", "--format",
                                                      "{{.Repository}}:{{.Tag}}").stdout:
        pytest.fail(f"the bed has no {sglang_router_image.IMAGE} "
                    f"(pip install sglang-router=={sglang_router_image.VERSION} failed)")
    pack, blackbox_port = tmp_path / "pack", free_port()
    monitor = monitor_key(pack, blackbox_port)
    path = sglang_spec(bed, deployctl, 4, monitor)
    workers = {f"{ADDRESS}:8465": "mixed", f"{ADDRESS}:8466": "mixed"}
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")  # its answer check asks every path
        assert code == 0 and doc["changed"] is True, doc
        assert doc["endpoint"] == f"http://{ADDRESS}:8464"
        assert [(i["name"], i["healthy"]) for i in doc["instances"]] == [
            (SGLANG_SERVERS[0], True), (SGLANG_SERVERS[1], True), (f"{SGLANG}-router", True)]
        inspect = json.loads(bed.docker_on(HOST, "inspect", *SGLANG_SERVERS, f"{SGLANG}-router").stdout)
        assert [i["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] for i in inspect[:2]] == [["0"], ["1"]]
        assert inspect[0]["Args"][:2] == ["-m", "sglang.launch_server"]
        assert inspect[0]["Args"][inspect[0]["Args"].index("--max-running-requests") + 1] == "4"
        assert inspect[2]["Path"] == "python3" and inspect[2]["Args"][:2] == ["-m", "sglang_router.launch_router"]
        assert router_workers(bed, path) == workers
        assert "sglang:num_running_reqs{" in host_curl(bed, "http://127.0.0.1:8465/metrics").stdout
        assert "smg_" in host_curl(bed, "http://127.0.0.1:8467/metrics").stdout  # the router's own, off 29000
        changed = sglang_spec(bed, deployctl, 8, monitor)
        status_pack_rerun_and_drain(bed, deployctl, (path, changed), SGLANG, SGLANG_SERVERS,
                                    f"http://{ADDRESS}:8464", (pack, blackbox_port), workers)

        # watch: an idle baseline, then 24 slow requests on one server (8 run at a time): busy, never restarted
        assert {line["instance"]: line["verdict"] for line in watch_once(deployctl, changed)} == {
            SGLANG_SERVERS[0]: "idle", SGLANG_SERVERS[1]: "idle", f"{SGLANG}-router": "healthy"}
        started = started_at(bed, SGLANG_SERVERS)
        saturating = load(bed, HOST, (8465,), 24)
        verdicts = []
        for _ in range(2):
            lines = watch_once(deployctl, changed)
            assert not [line for line in lines if line["type"] == "action"], lines
            verdicts += [(line["instance"], line["verdict"]) for line in lines]
        assert (SGLANG_SERVERS[0], "busy") in verdicts, verdicts
        assert {v for _, v in verdicts} <= {"busy", "idle", "healthy"}, verdicts  # healthy: the router
        saturating.join(300)
        assert not saturating.is_alive() and started_at(bed, SGLANG_SERVERS) == started

        # one server's engine hangs (/health stays 200, /health_generate and a generate never answer): restarted
        actions = watch_after_a_hang(bed, deployctl, changed, 8466)
        assert [(a["containers"], a["result"]) for a in actions] == [
            ([SGLANG_SERVERS[1]], "restarting"), ([SGLANG_SERVERS[1]], "ok")], actions
        now = started_at(bed, SGLANG_SERVERS)
        assert now[SGLANG_SERVERS[0]] == started[SGLANG_SERVERS[0]]
        assert now[SGLANG_SERVERS[1]][0] == started[SGLANG_SERVERS[1]][0] and now[SGLANG_SERVERS[1]] != started[
            SGLANG_SERVERS[1]]
        assert router_workers(bed, changed) == workers  # put back once it served
        answered_through(bed, 8464)  # round robin over both
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, SGLANG) == {}


def watch_after_a_hang(bed, deployctl, path, port: int) -> list:
    """The stand-in's engine on `port` hangs (its /health stays 200): the actions of the first of three watch
    probes that acts (suspect at the first probe, nothing held before; stalled at the next)."""
    from tests.e2e.test_watch import watch_once

    hung = bed.run_on(HOST, ["curl", "--silent", "-X", "POST", "--data", '{"mode": "hang"}',
                             f"http://127.0.0.1:{port}/standin/stall"]).stdout
    assert json.loads(hung)["hung"]
    assert host_curl(bed, "--output", "/dev/null", "--write-out", "%{http_code}",
                     f"http://127.0.0.1:{port}/health").stdout == "200"
    actions = []
    for _ in range(3):
        actions = [line for line in watch_once(deployctl, path) if line["type"] == "action"]
        if actions:
            break
    return actions


def answered_through(bed, port: int, times: int = 4) -> None:
    """`times` completions through the front on `port`, each with text."""
    body = json.dumps({"model": "tiny", "prompt": "after the restart", "max_tokens": 4})
    for _ in range(times):
        out = bed.run_on(HOST, ["curl", "--silent", "--fail", "--max-time", "60", "-H",
                                "Content-Type: application/json", "--data", body,
                                f"http://127.0.0.1:{port}/v1/completions"]).stdout
        assert json.loads(out)["choices"][0]["text"]


def status_pack_rerun_and_drain(bed, deployctl, paths, name, servers, front_url, monitor, workers) -> None:
    """An SGLang deployment behind sglang-router, deployed from paths[0]: status says every instance healthy; the
    pack's targets are up (the servers, the router probed at its /health and scraped on its metrics port) and every
    panel has series (SGLang's and the router's own names: the answer check and the smoke request gave the histograms
    observations); a re-run changes nothing; then a drain rollout to paths[1] (max_num_seqs 4 -> 8) under a load
    that starts before `up` and ends after it returned fails no request, replaces every server, keeps the router,
    which lists `workers`."""
    from tests.e2e.test_monitor import Monitoring, check_pack_serves
    from tests.e2e.test_rollout import up_under_load

    path, changed = paths
    code, status = deployctl.json("status", path)
    assert code == 0 and all(i["healthy"] for i in status["instances"]), status
    monitoring = Monitoring(*monitor)
    try:
        check_pack_serves(monitor[0], monitoring.prometheus, {"deployctl-servers": len(servers),
                                                              "deployctl-front": 1, "deployctl-router": 1})
    finally:
        monitoring.stop()
    before = container_ids(bed, HOST, name)
    code, doc = deployctl.json("up", path, "--skip", "weights")
    assert code == 0 and doc["changed"] is False
    assert container_ids(bed, HOST, name) == before

    run, doc = up_under_load(deployctl, changed, front_url, "--drain-timeout", "30")
    assert run["failed"] == 0, run
    after = container_ids(bed, HOST, name)
    assert all(after[s] != before[s] for s in servers) and after[f"{name}-router"] == before[f"{name}-router"]
    assert all(i["healthy"] for i in doc["instances"]) and router_workers(bed, changed) == workers


def started_at(bed, names) -> dict:
    """name -> (container id, when it last started)."""
    out = bed.docker_on(HOST, "inspect", "--format", "{{.Name}} {{.Id}} {{.State.StartedAt}}", *names).stdout
    return {line.split()[0].lstrip("/"): tuple(line.split()[1:]) for line in out.splitlines()}


def failing(doc):
    return [(h["host"], c["name"], c.get("gpu")) for h in doc["hosts"] for c in h["checks"] if c["status"] == "FAIL"]


def test_doctor_passes_then_flags_a_gpu_process_and_a_container_holding_a_gpu(gpu_host, deployctl):
    bed = gpu_host
    path = write_spec(bed, deployctl, "doc-gpu", mixed("1", 8484))
    code, doc = deployctl.json("doctor", path)
    assert code == 0, doc
    names = [c["name"] for c in doc["hosts"][0]["checks"]]
    assert names == ["ssh", "gpu_count", "gpu_memory", "driver", "docker", "nvidia_runtime", "ip_forward", "disk",
                     "gpu_free", "weights", "ports", "ephemeral_ports"]  # no npu_/hccn_ check on a GPU host

    bed.set_profile(HOST, gpu_processes={"1": [{"pid": 48213, "name": "/usr/bin/python3", "memory_mib": 72514}]})
    try:
        code, doc = deployctl.json("doctor", path)
        assert code == 3 and failing(doc) == [(HOST, "gpu_free", 1)]
    finally:
        bed.set_profile(HOST, gpu_processes={})

    bed.docker_on(HOST, "run", "--detach", "--name", "gpu-thief", "--gpus", "device=1", "--init",
                  bed.base_image, "sleep", "300")
    try:
        code, doc = deployctl.json("doctor", path)
        assert code == 3 and failing(doc) == [(HOST, "gpu_free", 1)]
    finally:
        bed.docker_on(HOST, "rm", "--force", "gpu-thief")


def test_doctor_flags_a_missing_nvidia_runtime(gpu_host, deployctl):
    bed = gpu_host
    path = write_spec(bed, deployctl, "doc-gpu-rt", mixed("0", 8486))
    bed.set_gpu_profile(HOST, gpus=2, nvidia_runtime=False)
    try:
        code, doc = deployctl.json("doctor", path)
        assert code == 3 and failing(doc) == [(HOST, "nvidia_runtime", None)]
    finally:
        bed.set_gpu_profile(HOST, gpus=2)
