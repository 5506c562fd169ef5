"""Triton (vLLM backend) on GPU hosts: the model repository files, the container, the plan, the smoke request."""

import hashlib
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from deployctl.commands.up import smoke_answers
from deployctl.errors import PlanError
from tests.plan.test_up import container_fact
from deployctl.plan.containers import LABEL_DEPLOYMENT, LABEL_DIGEST, container_for, docker_run
from deployctl.plan.up import digest_of, plan_up
from deployctl.servers.triton import repository as triton
from tests.plan.hostfacts import deployed
from deployctl.spec.load import load_spec_text

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "triton"
REPO = "/var/lib/deployctl/opt-125m-triton/triton"

TRITON = textwrap.dedent("""\
    version: 1
    name: opt-125m-triton
    platform: gpu
    hosts:
      gpu1: {address: 192.0.2.7}
    image: {name: nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3}
    weights: {source: s3://models/opt-125m/, dest: /mnt/weights/opt-125m}
    model: {served_name: opt-125m, max_model_len: 2048, max_num_seqs: 64, max_num_batched_tokens: 2048}
    server: triton
    topology:
      mode: mixed
      instances:
        - {host: gpu1, devices: [0], port: 8000}
    """)


def spec(text=TRITON):
    return load_spec_text(text, environ={})


def test_config_pbtxt_matches_golden_file():
    assert triton.render_config(spec()) == (GOLDEN / "config.pbtxt").read_text()


def test_model_json_matches_golden_file():
    s = spec()
    assert triton.render_engine_args(s, s.instances[0]) == (GOLDEN / "model.json").read_text()


def test_config_pbtxt_parses_strictly_as_model_config():
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    from google.protobuf import text_format

    config = text_format.Parse(triton.render_config(spec()), model_config_pb2.ModelConfig())
    inputs = {i.name: (model_config_pb2.DataType.Name(i.data_type), list(i.dims), i.optional) for i in config.input}
    assert config.name == "opt-125m"
    assert config.backend == "vllm"
    assert config.max_batch_size == 0
    assert config.model_transaction_policy.decoupled is True
    assert inputs == {
        "text_input": ("TYPE_STRING", [1], False),
        "stream": ("TYPE_BOOL", [1], True),
        "sampling_parameters": ("TYPE_STRING", [1], True),
        "exclude_input_in_output": ("TYPE_BOOL", [1], True),
    }
    assert [(o.name, model_config_pb2.DataType.Name(o.data_type), list(o.dims)) for o in config.output] == [
        ("text_output", "TYPE_STRING", [-1])]
    assert [(g.count, model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)) for g in config.instance_group] == [
        (1, "KIND_MODEL")]


def test_engine_args_tp_is_gpu_count_and_optional_keys_only_when_given():
    s = spec(TRITON.replace("devices: [0]", "devices: [2, 3]").replace(
        "model: {served_name: opt-125m, max_model_len: 2048, max_num_seqs: 64, max_num_batched_tokens: 2048}",
        "model: {served_name: opt-125m, extra_args: [--gpu-memory-utilization, '0.75']}"))
    assert triton.engine_args(s, s.instances[0]) == {
        "model": "/mnt/weights/opt-125m", "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.75,
    }


def test_container_runs_tritonserver_with_repository_mounted_read_only_and_gpus():
    s = spec()
    argv = docker_run(container_for(s, s.instances[0]), "d1")
    assert argv == (
        "docker", "run", "--detach", "--label", "deployctl.digest=d1",
        "--name", "opt-125m-triton-mixed-0", "--net=host", "--init", "--shm-size", "16g",
        "--label", "deployctl.deployment=opt-125m-triton", "--label", "deployctl.role=mixed",
        "--label", "deployctl.instance=opt-125m-triton-mixed-0",
        "--gpus", "device=0",
        "--volume", "/mnt/weights/opt-125m:/mnt/weights/opt-125m:ro",
        "--volume", f"{REPO}:{REPO}:ro",
        "--entrypoint", "tritonserver",
        "nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3",
        "--model-repository", REPO, "--model-control-mode", "explicit",
        "--load-model", "opt-125m", "--http-port", "8000", "--grpc-port", "8001", "--metrics-port", "8002",
    )


def test_vllm_server_on_gpu_runs_the_openai_server_with_tp_from_gpu_count():
    s = spec(TRITON.replace("server: triton", "server: vllm").replace("devices: [0]", "devices: [0, 1]"))
    container = container_for(s, s.instances[0])
    assert container.gpus == '"device=0,1"'  # docker's CSV parsing needs the quotes for a list
    assert container.devices == ()
    assert container.command == (
        "python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/mnt/weights/opt-125m",
        "--tensor-parallel-size", "2", "--max-model-len", "2048", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "2048", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "opt-125m")
    plan = plan_up(s, {"gpu1": deployed((), "sha256:img")})
    [start] = [step for step in plan.steps if step.stage == "workers"]
    assert (start.health.port, start.health.path) == (8000, "/health")
    [verify] = [step for step in plan.steps if step.stage == "verify"]
    assert [c.argv[-1] for c in verify.commands] == ["http://127.0.0.1:8000/v1/chat/completions"]


def repository_hashes(s):
    files = triton.repository_files(s, s.instances[0])
    return {path: hashlib.sha256(content).hexdigest() for path, content in files.items()}


def running(s, image_id="sha256:img"):
    instance = s.instances[0]
    labels = {LABEL_DEPLOYMENT: s.name, "deployctl.role": "mixed",
              LABEL_DIGEST: digest_of(container_for(s, instance), image_id, None, s)}
    return (container_fact("id1", instance.name, "running", image_id, labels, gpus=("0",)),)


def test_fresh_plan_writes_the_repository_before_starting_and_checks_triton_health():
    s = spec()
    plan = plan_up(s, {"gpu1": deployed((), "sha256:img")})
    assert [stage.name for stage in plan.stages] == ["checks", "image", "files", "stop", "workers", "answers", "verify"]
    [files] = [step for step in plan.steps if step.stage == "files"]
    assert {p.path: (p.content, p.mode) for p in files.puts} == {
        f"{REPO}/opt-125m/config.pbtxt": ((GOLDEN / "config.pbtxt").read_bytes(), 0o644),
        f"{REPO}/opt-125m/1/model.json": ((GOLDEN / "model.json").read_bytes(), 0o644),
    }
    [start] = [step for step in plan.steps if step.stage == "workers"]
    assert (start.health.port, start.health.path) == (8000, "/v2/health/ready")
    [verify] = [step for step in plan.steps if step.stage == "verify"]
    ready, smoke = verify.commands
    assert ready.argv[-1] == "http://127.0.0.1:8000/v2/health/ready"
    assert smoke.argv[-1] == "http://127.0.0.1:8000/v2/models/opt-125m/generate"
    assert json.loads(smoke.stdin) == {"text_input": "Say hello in one short sentence.",
                                       "parameters": {"stream": False, "temperature": 0}}


def test_rerun_with_repository_and_container_current_is_a_no_op():
    s = spec()
    plan = plan_up(s, {"gpu1": deployed(running(s), "sha256:img", repository_hashes(s))})
    assert not plan.changed
    assert [(step.stage, step.action) for step in plan.steps] == [
        ("image", "keep"), ("files", "keep"), ("workers", "keep")]


def test_changed_engine_args_rewrite_model_json_and_replace_the_container():
    old = spec()
    new = spec(TRITON.replace("max_model_len: 2048", "max_model_len: 1024"))
    # max_model_len is not on tritonserver's command line: only the repository digest sees the change.
    assert container_for(old, old.instances[0]).command == container_for(new, new.instances[0]).command
    plan = plan_up(new, {"gpu1": deployed(running(old), "sha256:img", repository_hashes(old))})
    [files] = [step for step in plan.steps if step.stage == "files"]
    assert [p.path for p in files.puts] == [f"{REPO}/opt-125m/1/model.json"]
    assert {(step.stage, step.action) for step in plan.steps if step.container} == {
        ("stop", "replace"), ("workers", "replace"), ("verify", "run")}
    [stop] = [step for step in plan.steps if step.stage == "stop"]
    assert stop.undo_health.path == "/v2/health/ready"


def test_instances_sharing_a_host_with_different_gpu_counts_are_refused():
    s = spec(TRITON + "    - {host: gpu1, devices: [1, 2], port: 8010}\n")
    assert len(s.instances) == 2
    with pytest.raises(PlanError, match="gpu1: Triton instances of 'opt-125m-triton' need different"):
        plan_up(s, {"gpu1": deployed((), "sha256:img")})


def test_up_summary_takes_text_output_from_triton_and_content_from_vllm():
    step = SimpleNamespace(container="c0")
    triton_out = [SimpleNamespace(stdout=""), SimpleNamespace(stdout='{"model_name": "m", "text_output": "Hi!"}')]
    vllm_out = [SimpleNamespace(stdout='{"choices": [{"message": {"content": "Hello."}}]}')]
    report = SimpleNamespace(results_of=lambda stage: [SimpleNamespace(step=step, results=triton_out)])
    assert smoke_answers(report) == {"c0": "Hi!"}
    report = SimpleNamespace(results_of=lambda stage: [SimpleNamespace(step=step, results=vllm_out)])
    assert smoke_answers(report) == {"c0": "Hello."}
