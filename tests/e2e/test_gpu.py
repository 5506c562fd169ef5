"""GPU hosts on the test bed: Triton (vLLM backend) and plain vLLM deploy on a fake NVIDIA host; doctor's GPU checks."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import MODEL, container_ids

HOST = "tb4"
ADDRESS = "10.200.0.14"
GPU = ("platform: gpu\n"
       "requirements: {driver: '550.54.15', cards: 2, gpu_memory_gb: 80, ip_forward: true, free_disk_gb: 1}\n")


def mixed(devices: str, port: int) -> str:
    return f"topology:\n  mode: mixed\n  instances:\n    - {{host: {HOST}, devices: [{devices}], port: {port}}}\n"


def write_spec(bed, deployctl, name, topology, server="triton"):
    extra = MODEL + GPU + f"server: {server}\n"
    return deployctl.write(bed.spec_yaml(name, topology, hosts_used=[HOST], extra=extra), name=f"{name}.yaml")


@pytest.fixture(scope="module")
def gpu_host(bed):
    """tb4 as a 2 x H100 host with the NVIDIA runtime, for this module only; an Ascend host again after."""
    bed.set_gpu_profile(HOST, gpus=2)
    try:
        yield bed
    finally:
        bed.reset_gpu(HOST)


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


def test_sglang_on_gpu_up_rerun_status_and_down(gpu_host, deployctl):
    """server sglang (issue 43) on the playbook's shape: the stand-in plays SGLang's launch_server (its own option
    list, /health, sglang: metrics, its SIGTERM drain)."""
    bed = gpu_host
    path = write_spec(bed, deployctl, "e2e-sglang", mixed("0, 1", 8464), server="sglang")
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is True, doc
        assert doc["smoke"]["e2e-sglang-mixed-0"]
        inspect = json.loads(bed.docker_on(HOST, "inspect", "e2e-sglang-mixed-0").stdout)[0]
        assert inspect["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["0", "1"]
        assert inspect["Args"][:2] == ["-m", "sglang.launch_server"]
        assert inspect["Args"][inspect["Args"].index("--tp-size") + 1] == "2"
        assert "sglang:num_running_reqs{" in host_curl(bed, "http://127.0.0.1:8464/metrics").stdout
        code, status = deployctl.json("status", path)
        assert code == 0
        assert [(i["name"], i["state"], i["healthy"]) for i in status["instances"]] == [
            ("e2e-sglang-mixed-0", "running", True)]
        before = container_ids(bed, HOST, "e2e-sglang")
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
        assert container_ids(bed, HOST, "e2e-sglang") == before
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, "e2e-sglang") == {}


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
