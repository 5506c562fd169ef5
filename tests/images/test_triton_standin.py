"""The `tritonserver` stand-in, started as deployctl starts it, on a repository deployctl renders."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deployctl.servers.triton import repository as triton
from deployctl.spec.load import load_spec_text
from tests.ports import free_ports

STANDIN = Path(__file__).resolve().parents[2] / "images" / "standin"
TRITONSERVER = STANDIN / "bin" / "tritonserver"


def write_repository(tmp_path: Path, weights: Path) -> Path:
    """What `up` writes on a host, under tmp_path instead of /var/lib/deployctl/<name>."""
    spec = load_spec_text(textwrap.dedent(f"""\
        version: 1
        name: tri
        platform: gpu
        hosts: {{gpu1: {{address: 192.0.2.7}}}}
        image: {{name: deployctl/standin-vllm:latest}}
        weights: {{dest: {weights}}}
        model: {{served_name: tiny, max_model_len: 2048}}
        server: triton
        topology: {{mode: mixed, instances: [{{host: gpu1, devices: [0], port: 8000}}]}}
        """), environ={})
    for path, content in triton.repository_files(spec, spec.instances[0]).items():
        target = tmp_path / "repo" / Path(path).relative_to(triton.repository_dir(spec))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return tmp_path / "repo"


@pytest.fixture
def repo(tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    return write_repository(tmp_path, weights)


def start(repo: Path, ports, *extra, env=None):
    http_port, grpc_port, metrics_port = ports
    argv = ["sh", str(TRITONSERVER), "--model-repository", str(repo), "--model-control-mode", "explicit",
            "--load-model", "tiny", "--http-port", str(http_port), "--grpc-port", str(grpc_port),
            "--metrics-port", str(metrics_port), *extra]
    environ = {**os.environ, "PYTHONPATH": str(STANDIN), "STANDIN_PYTHON": sys.executable,
               "STANDIN_STARTUP_S": "0", **(env or {})}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)


def request(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_listening(proc, port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stdout.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("not listening")


@pytest.fixture
def server(repo):
    ports = free_ports(3)
    proc = start(repo, ports)
    try:
        wait_listening(proc, ports[0])
        yield proc, ports
    finally:
        proc.kill()
        proc.wait()


def test_ready_endpoints_and_generate_answer(server):
    _, (http_port, _, _) = server
    assert request(http_port, "GET", "/v2/health/ready") == (200, b"")
    assert request(http_port, "GET", "/v2/models/tiny/ready") == (200, b"")
    status, body = request(http_port, "POST", "/v2/models/tiny/generate",
                           {"text_input": "Say hello", "parameters": {"stream": False, "temperature": 0,
                                                                       "max_tokens": 3}})
    answer = json.loads(body)
    assert status == 200
    assert sorted(answer) == ["model_name", "model_version", "text_output"]
    assert (answer["model_name"], answer["model_version"]) == ("tiny", "1")
    assert answer["text_output"].startswith("Say hello ") and len(answer["text_output"].split()) == 5
    # greedy: the same prompt gives the same answer
    assert request(http_port, "POST", "/v2/models/tiny/generate",
                   {"text_input": "Say hello", "parameters": {"max_tokens": 3}})[1] == body


def test_unknown_model_and_bad_request_are_refused(server):
    _, (http_port, _, _) = server
    status, body = request(http_port, "GET", "/v2/models/other/ready")
    assert (status, json.loads(body)) == (400, {"error": "Request for unknown model: 'other' is not found"})
    status, body = request(http_port, "POST", "/v2/models/tiny/generate", {"prompt": "seed 002's input name"})
    assert (status, json.loads(body)) == (400, {"error": "input 'text_input' is required and must be a string"})


def test_grpc_and_metrics_ports_listen(server):
    _, (http_port, grpc_port, metrics_port) = server
    request(http_port, "POST", "/v2/models/tiny/generate", {"text_input": "x"})
    status, body = request(metrics_port, "GET", "/metrics")
    assert (status, body) == (200, b'nv_inference_request_success{model="tiny",version="1"} 1\n')
    with socket.create_connection(("127.0.0.1", grpc_port), timeout=2):
        pass


def test_sigterm_stops_it_cleanly(server):
    proc, _ = server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0


@pytest.mark.parametrize("breakage, message", [
    (lambda repo: (repo / "tiny" / "config.pbtxt").unlink(),
     "failed to load 'tiny': {repo}/tiny/config.pbtxt is missing"),
    (lambda repo: (repo / "tiny" / "config.pbtxt").write_text(
        (repo / "tiny" / "config.pbtxt").read_text().replace('backend: "vllm"', 'backend: "python"')),
     "failed to load 'tiny': config.pbtxt lacks backend: \"vllm\""),
    (lambda repo: (repo / "tiny" / "1" / "model.json").unlink(),
     "failed to load 'tiny': '{repo}/tiny/1/model.json' containing vllm engine args must be provided"),
    (lambda repo: (repo / "tiny" / "1" / "model.json").write_text('{"model": "/no/such/weights"}'),
     "failed to load 'tiny': model path /no/such/weights does not exist in the container"),
    # the seed's model.json key, gone from vLLM's AsyncEngineArgs in 0.12: Triton's backend passes model.json as
    # keyword arguments (vllm_backend src/model.py)
    (lambda repo: (repo / "tiny" / "1" / "model.json").write_text(
        '{"model": "/no/such/weights", "disable_log_requests": true}'),
     "failed to load 'tiny': AsyncEngineArgs.__init__() got an unexpected keyword argument 'disable_log_requests'"),
])
def test_broken_repository_is_refused(repo, breakage, message):
    breakage(repo)
    proc = start(repo, free_ports(3))
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1
    assert out == f"standin tritonserver: error: {message.format(repo=repo)}\n"


def test_tensor_parallel_size_must_match_the_visible_gpus(repo):
    proc = start(repo, free_ports(3), env={"NVIDIA_VISIBLE_DEVICES": "0,1"})
    out, _ = proc.communicate(timeout=10)
    assert (proc.returncode, out) == (
        1, "standin tritonserver: error: failed to load 'tiny': tensor_parallel_size 1 but 2 GPU(s) visible\n")


def test_unknown_flag_is_refused(repo):
    proc = start(repo, free_ports(3), "--no-such-flag", "1")
    out, _ = proc.communicate(timeout=10)
    assert (proc.returncode, out) == (1, "standin tritonserver: error: unrecognized option --no-such-flag\n")
