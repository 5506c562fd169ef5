"""The SGLang stand-in (`python -m sglang.launch_server`, images/standin/standin/sglang_server.py), started with the
argv deployctl renders: SGLang's options and refusals, its /health, its `sglang:` metrics, its stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.plan.containers import container_for
from deployctl.spec.load import load_spec_text
from tests.images.test_triton_standin import request, wait_listening
from tests.ports import free_ports
from tests.servers.sglang.test_flavour import BASE

STANDIN = Path(__file__).resolve().parents[2] / "images" / "standin"


def rendered(port: int) -> list[str]:
    """The words after `python -m`, as deployctl renders them for an instance on `port`."""
    spec = load_spec_text(BASE.replace("port: 30000", f"port: {port}").replace("{address: 10.200.0.11}",
                                                                               "{address: 127.0.0.1}"), environ={})
    command = list(container_for(spec, spec.instances[0]).command)
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    return command[2:]


def start(words: list[str], **env: str) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": str(STANDIN), "STANDIN_STARTUP_S": "0", **env}
    return subprocess.Popen([sys.executable, "-m", *words], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=environ)


@pytest.fixture
def server():
    (port,) = free_ports(1)
    words = rendered(port)
    words[words.index("--host") + 1] = "127.0.0.1"  # loopback only in tests
    proc = start(words)
    try:
        wait_listening(proc, port)
        yield proc, port
    finally:
        proc.kill()
        proc.wait()


def test_it_serves_health_answers_and_sglang_metrics(server):
    _, port = server
    assert request(port, "GET", "/health") == (200, b"")
    assert request(port, "GET", "/health_generate") == (200, b"")
    status, body = request(port, "POST", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 3})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3
    status, body = request(port, "GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'sglang:generation_tokens_total{model_name="tiny",engine_type="unified"} 3.0' in text
    assert "sglang:num_running_reqs{" in text and "vllm:" not in text
    assert 'sglang:per_stage_req_latency_seconds_count{model_name="tiny",engine_type="unified",' \
           'stage="prefill_forward"} 1.0' in text


def test_sigterm_turns_health_503_then_it_exits_once_nothing_is_in_flight(server):
    proc, port = server
    proc.send_signal(signal.SIGTERM)
    for line in proc.stdout:  # the event: SGLang's own log line of the SIGTERM handler
        if "SIGTERM received" in line:
            break
    assert request(port, "GET", "/health")[0] == 503
    assert request(port, "POST", "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 1})[0] == 200
    assert proc.wait(timeout=30) == 0


def test_no_metrics_route_without_enable_metrics():
    (port,) = free_ports(1)
    words = [w for w in rendered(port) if w != "--enable-metrics"]
    words[words.index("--host") + 1] = "127.0.0.1"
    proc = start(words)
    try:
        wait_listening(proc, port)
        assert request(port, "GET", "/metrics")[0] == 404
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("extra,error", [
    (["--tp-sise", "2"], "sglang serve: error: unrecognized arguments: --tp-sise 2"),
    (["--gpu-memory-utilization", "0.9"], "sglang serve: error: unrecognized arguments: --gpu-memory-utilization 0.9"),
    (["--max-running-requests", "lots"], "sglang serve: error: argument --max-running-requests: invalid int value: "
                                         "'lots'"),
])
def test_it_refuses_what_sglangs_parser_refuses_with_exit_2(extra, error):
    done = subprocess.run([sys.executable, "-m", *rendered(30000), *extra], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(STANDIN)}, timeout=30)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == error


def test_a_hung_engine_keeps_health_200_and_fails_health_generate_after_its_timeout():
    """SGLang's /health answers without generating; /health_generate waits SGLANG_HEALTH_CHECK_TIMEOUT for the
    scheduler's answer to its one-token request and says 503 when none came (http_server.py:721-795)."""
    (port,) = free_ports(1)
    words = rendered(port)
    words[words.index("--host") + 1] = "127.0.0.1"
    proc = start(words, SGLANG_HEALTH_CHECK_TIMEOUT="1")
    try:
        wait_listening(proc, port)
        assert request(port, "POST", "/standin/stall", {"mode": "hang"})[0] == 200
        assert request(port, "GET", "/health") == (200, b"")
        assert request(port, "GET", "/health_generate") == (503, b"")
        assert request(port, "DELETE", "/standin/stall")[0] == 200
        assert request(port, "GET", "/health_generate") == (200, b"")
    finally:
        proc.kill()
        proc.wait()
