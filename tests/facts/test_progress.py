"""`deployctl watch`'s probes: each API server's health code and per-engine /metrics counters (the script run for
real against a stand-in on loopback), and each container's log lines strictly after the last stamp read."""

from __future__ import annotations

import os
import subprocess

from deployctl.bench.telemetry import Engine
from deployctl.facts.progress import (LOGS_SCRIPT, MARK, ServerProgress, logs_probe, parse_new_lines,
                                      parse_progress, progress_probe)
from tests.images.test_standin import MIXED, dev_dir, launch, vllm_args, weights  # noqa: F401 (fixtures)
from tests.ports import free_port

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="q",engine="0"} 2.0
vllm:num_requests_running{model_name="q",engine="1"} 0.0
vllm:num_requests_waiting{model_name="q",engine="0"} 0.0
vllm:num_requests_waiting{model_name="q",engine="1"} 3.0
vllm:generation_tokens_total{model_name="q",engine="0"} 120.0
vllm:generation_tokens_total{model_name="q",engine="1"} 40.0
vllm:prompt_tokens_total{model_name="q",engine="0"} 9.0
vllm:prompt_tokens_total{model_name="q",engine="1"} 4.0
"""


def test_health_codes_and_each_engines_counters_by_port():
    text = f"{MARK} 9100 200\n{METRICS}\n{MARK} 9101 503\n\n{MARK} 9102 000\n{{\"detail\": \"Not Found\"}}\n"
    found = parse_progress(text)
    assert found[9100] == ServerProgress(200, {
        "0": Engine("0", running=2.0, waiting=0.0, generation_tokens=120.0, prompt_tokens=9.0),
        "1": Engine("1", running=0.0, waiting=3.0, generation_tokens=40.0, prompt_tokens=4.0)})
    assert found[9101] == ServerProgress(503, {}) and found[9102] == ServerProgress(0, {})


def test_the_progress_script_asks_a_real_server(launch, weights, tmp_path):  # noqa: F811
    port = free_port()
    server = launch(MIXED, vllm_args(weights, port, 1), {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0]))}, port)
    assert server.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "a b", "max_tokens": 5})[0] == 200
    probe = progress_probe(((port, "/health"), (free_port(), "/health")))
    done = subprocess.run(probe.argv, capture_output=True, text=True, timeout=30, check=True)
    found = probe.parse(done.stdout)
    assert found[port].health_code == 200
    assert found[port].engines["0"].generation_tokens == 5.0 and found[port].engines["0"].prompt_tokens == 2.0
    assert [p.health_code for q, p in found.items() if q != port] == [0]  # nothing listens there


STAMP = "2026-11-25T23:10:16.{:09d}Z"


def test_only_lines_after_the_last_stamp_are_new_and_the_first_probe_only_sets_the_baseline():
    text = (f"{MARK} d-r0\n{STAMP.format(5)} INFO old line\n{STAMP.format(7)} ERROR Engine core proc EngineCore_DP0 "
            f"died unexpectedly, shutting down client.\n{MARK} d-r1\n{STAMP.format(9)} INFO loaded\n"
            f"{MARK} d-gone\nError response from daemon: No such container: d-gone\n")
    found = parse_new_lines(text, {"d-r0": STAMP.format(5), "d-r1": None})
    assert found["d-r0"].lines == ((STAMP.format(7), "ERROR Engine core proc EngineCore_DP0 died unexpectedly, "
                                                     "shutting down client."),)
    assert found["d-r0"].last == STAMP.format(7)
    assert found["d-r1"].lines == () and found["d-r1"].last == STAMP.format(9)
    assert found["d-gone"].lines == () and found["d-gone"].last is None


def test_the_logs_script_asks_docker_since_the_stamp_or_for_the_newest_line(tmp_path):
    fake = tmp_path / "docker"  # prints its argv: what the host's docker would be asked
    fake.write_text('#!/bin/sh\necho "2026-11-25T23:10:16.000000001Z $*"\n')
    fake.chmod(0o755)
    probe = logs_probe({"d-r0": STAMP.format(5), "d-r1": None})
    assert probe.argv[:3] == ("sh", "-c", LOGS_SCRIPT)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(probe.argv, capture_output=True, text=True, timeout=30, env=env, check=True).stdout
    assert out.splitlines() == [
        f"{MARK} d-r0", f"2026-11-25T23:10:16.000000001Z logs --timestamps --since {STAMP.format(5)} d-r0",
        f"{MARK} d-r1", "2026-11-25T23:10:16.000000001Z logs --timestamps --tail 1 d-r1"]
