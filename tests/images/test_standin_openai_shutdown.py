"""The OpenAI-module stand-in (`python -m vllm.entrypoints.openai.api_server`: vLLM on GPU, the vendor images) stops
as the vLLM it plays: with `--shutdown-timeout T` (only vLLM >= 0.18 takes it, vllm #36666) requests in flight
finish within T; without it, uvicorn's graceful shutdown (standin/drain.py)."""

from __future__ import annotations

import signal
import time

from tests.images.test_standin import MIXED, dev_dir, launch, vllm_args, weights  # noqa: F401 (fixtures)
from tests.images.test_standin_capacity import EVENT_TIMEOUT_S, Metrics
from tests.images.test_standin_shutdown import Stream, finished, in_background
from tests.ports import free_port


def wait_logged(server, text: str) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while text not in server.output():
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.01)  # a poll interval


def test_the_openai_server_given_shutdown_timeout_drains_what_is_in_flight(launch, weights, tmp_path):  # noqa: F811
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0])), "STANDIN_TPOT_MS": "20"}
    server = launch(MIXED, vllm_args(weights, port, 1, "llama2-13b", "--shutdown-timeout", "60"), env, port)
    metrics = Metrics(port, "llama2-13b")
    streams = [in_background(lambda: Stream(port, 100)) for _ in range(2)]
    metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 2, "two streams")
    server.proc.send_signal(signal.SIGTERM)
    wait_logged(server, "draining in-flight requests count=2 timeout=60s")
    for thread in streams:
        stream = finished(thread)
        assert len(stream.texts()) == 100 and stream.finish_reasons()[-1] == "length"
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert "SIGTERM: stopping (vLLM's shutdown mode=drain timeout=60s)" in server.output()
    assert "ignoring unknown vLLM argument --shutdown-timeout" not in server.output()


def test_the_flag_is_read_as_vllm_reads_it(launch, weights, tmp_path):  # noqa: F811
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0]))}
    negative = launch(MIXED, vllm_args(weights, port, 1, "llama2-13b", "--shutdown-timeout=-1"), env, port,
                      wait=False)
    assert negative.proc.wait(timeout=EVENT_TIMEOUT_S) != 0
    assert "--shutdown-timeout: -1 must be at least 0" in negative.output()
    server = launch(MIXED, vllm_args(weights, port, 1), env, port)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert "SIGTERM: stopping (uvicorn's graceful shutdown" in server.output()  # not given: as before
