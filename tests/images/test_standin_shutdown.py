"""Requests that stream for seconds (STANDIN_TPOT_MS), the /metrics gauges while they do, and SIGTERM with requests
in flight, as the emulated server stops (standin/drain.py): uvicorn's graceful shutdown (vLLM < 0.18, the vendor
launchers) and vLLM's --shutdown-timeout (vLLM >= 0.18), run as subprocesses on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time

import pytest
from tests.images.test_standin import dev_dir, launch, weights  # noqa: F401 (fixtures)
from tests.images.test_standin_capacity import EVENT_TIMEOUT_S, Metrics, records
from tests.images.test_standin_capacity import start as start_mixed
from tests.images.test_vllm_ascend_standin import serve_args, start  # noqa: F401 (fixtures)
from tests.ports import free_port

MODEL = "llama2-13b"


class Stream:
    """A streamed completion read event by event."""

    def __init__(self, port: int, tokens: int, model: str = MODEL, rid: str = "") -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=EVENT_TIMEOUT_S)
        body = {"model": model, "prompt": "stream me", "max_tokens": tokens, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        self.conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json", **({"X-Request-Id": rid} if rid else {})})
        self.response = self.conn.getresponse()
        self.events = []

    def next(self):
        """The next event's payload, or None at the end of the stream."""
        while True:
            line = self.response.readline()
            if not line:
                return None
            if line.startswith(b"data: "):
                self.events.append(line[len(b"data: "):].strip().decode())
                return self.events[-1]

    def rest(self) -> "Stream":
        while self.next() is not None:
            pass
        self.conn.close()
        return self

    def texts(self):
        return [json.loads(e)["choices"][0]["text"] for e in self.events[:-1] if json.loads(e)["choices"]]

    def finish_reasons(self):
        return [json.loads(e)["choices"][0]["finish_reason"] for e in self.events[:-1] if json.loads(e)["choices"]]

    def usage(self):
        return json.loads(self.events[-2])["usage"]


def in_background(make) -> threading.Thread:
    """Run `make()` (a Stream, started on the thread) to its end on a thread; see finished()."""
    def run():
        thread.stream = make().rest()

    thread = threading.Thread(target=run, daemon=True)
    thread.stream = None
    thread.start()
    return thread


def finished(thread: threading.Thread) -> Stream:
    thread.join(EVENT_TIMEOUT_S)
    assert not thread.is_alive(), "a stream did not end"
    return thread.stream


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def wait_refused(port: int) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while not refused(port):
        assert time.monotonic() < deadline, f"port {port} still accepts connections"
        time.sleep(0.01)  # a poll interval


def test_a_stream_lasts_its_tokens_times_tpot_and_the_gauges_follow_it(launch, weights, tmp_path):  # noqa: F811
    server, metrics = start_mixed(launch, weights, tmp_path, tpot_ms=20, capacity=1)
    first = Stream(server.port, 50, rid="long")
    assert json.loads(first.next())["choices"][0]["text"]
    values = metrics.read()
    assert (values["vllm:num_requests_running"], values["vllm:num_requests_waiting"]) == (1, 0)
    tokens_then = values["vllm:generation_tokens_total"]
    assert tokens_then >= 1
    second = in_background(lambda: Stream(server.port, 3, rid="queued"))  # waits for the only slot
    metrics.wait_for(lambda v: v["vllm:num_requests_waiting"] == 1, "a waiting request")
    for _ in range(10):
        first.next()
    assert metrics.read()["vllm:generation_tokens_total"] >= tokens_then + 10  # counted as each token goes out
    assert metrics.read()["vllm:num_requests_running"] == 1
    first.rest()
    assert len(first.texts()) == 50 and first.finish_reasons()[-1] == "length"
    assert finished(second).finish_reasons()[-1] == "length"
    values = metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 0, "no request running")
    assert values["vllm:num_requests_waiting"] == 0 and values["vllm:generation_tokens_total"] == 53
    assert values["vllm:request_success_total:length"] == 2
    long = records(server)["long"]
    assert long["chunk_ns"][-1] - long["arrival_ns"] >= 49 * 20e6 - 1e6  # never early: 50 tokens at 20 ms


def test_sigterm_lets_streams_in_flight_finish_and_refuses_new_connections(launch, weights, tmp_path):  # noqa: F811
    server, metrics = start_mixed(launch, weights, tmp_path, tpot_ms=20)
    idle = http.client.HTTPConnection("127.0.0.1", server.port, timeout=EVENT_TIMEOUT_S)
    idle.request("GET", "/health")
    assert idle.getresponse().read() == b""  # a keep-alive connection, idle when the signal comes
    streams = [in_background(lambda: Stream(server.port, 100)) for _ in range(2)]
    metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 2, "two streams")
    server.proc.send_signal(signal.SIGTERM)
    wait_refused(server.port)  # uvicorn closes its listening socket first
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        idle.request("GET", "/health")  # and every connection not inside a request
        idle.getresponse()
    for thread in streams:
        stream = finished(thread)
        assert len(stream.texts()) == 100 and stream.finish_reasons()[-1] == "length"
        assert stream.events[-1] == "[DONE]"
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    log = server.output()
    assert "standin: SIGTERM: stopping (uvicorn's graceful shutdown" in log
    assert "standin: waiting for 2 connection(s) to close" in log
    assert log.splitlines()[-1] == "standin: shutting down" and "Traceback" not in log


def test_sigterm_with_a_connection_open_and_no_request_exits_without_a_traceback(mixed_server):
    """The flake of test_sigterm_stops_it_cleanly: a connection still open at exit (the fixture's probe under load)
    had its task cancelled by asyncio.run, and Python 3.11's done-callback printed CancelledError's traceback."""
    held = socket.create_connection(("127.0.0.1", mixed_server.port), timeout=EVENT_TIMEOUT_S)
    mixed_server.json("GET", "/v1/models")  # the server has accepted connections since `held`
    mixed_server.proc.send_signal(signal.SIGTERM)
    assert mixed_server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert held.recv(1) == b""  # closed by the server
    held.close()
    log = mixed_server.output()
    assert log.splitlines()[-1] == "standin: shutting down"
    assert "Traceback" not in log and "CancelledError" not in log


@pytest.fixture
def mixed_server(launch, weights, tmp_path):  # noqa: F811
    return start_mixed(launch, weights, tmp_path)[0]


# --- vllm serve: vLLM's --shutdown-timeout ------------------------------------------------------------------

def serve(start, *extra, tpot_ms=20, release=None):  # noqa: F811
    port = free_port()
    env = {"STANDIN_TPOT_MS": str(tpot_ms), **({"STANDIN_VLLM_ASCEND_VERSION": release} if release else {})}
    proc = start([*serve_args(port), *extra], [0], port=port, env=env)
    proc.wait_line("startup complete: serving on")
    return proc, Metrics(port, "qwen")


def test_shutdown_timeout_drains_streams_in_flight_and_new_requests_fail_with_500(start):  # noqa: F811
    server, metrics = serve(start, "--shutdown-timeout", "60")
    streams = [in_background(lambda: Stream(server.port, 150, "qwen")) for _ in range(2)]
    metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 2, "two streams")
    server.proc.send_signal(signal.SIGTERM)
    server.wait_line("draining in-flight requests count=2 timeout=60s")
    # the listener stays open while the engine drains; tokenizing a new request fails (vLLM 0.33.0
    # renderers/base.py:144-145, :427-433), the catch-all handler answers 500
    status, answer = server.json("POST", "/v1/completions", {"model": "qwen", "prompt": "late", "max_tokens": 2})
    # vLLM >= 0.10.1's error body (vllm #22099)
    assert status == 500 and answer["error"]["message"] == "cannot schedule new futures after shutdown"
    assert answer["error"]["type"] == "InternalServerError"
    assert server.request("GET", "/health") == (200, b"")  # the engine is not dead
    assert metrics.read()["vllm:num_requests_running"] == 2
    for thread in streams:
        stream = finished(thread)
        assert len(stream.texts()) == 150 and stream.finish_reasons()[-1] == "length"
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert not server.listening()
    log = server.output()
    assert "SIGTERM: stopping (vLLM's shutdown mode=drain timeout=60s)" in log
    assert "[shutdown] EngineCore: request processing complete" in log
    assert log.splitlines()[-1] == "standin: shutting down" and "Traceback" not in log


def test_without_shutdown_timeout_vllm_aborts_requests_in_flight(start):  # noqa: F811
    server, metrics = serve(start, tpot_ms=50)
    stream = Stream(server.port, 200, "qwen")
    assert json.loads(stream.next())["choices"][0]["text"]
    whole = {"model": "qwen", "prompt": "whole", "max_tokens": 200, "stream": False}
    answers = []
    thread = threading.Thread(target=lambda: answers.append(server.json("POST", "/v1/completions", whole)))
    thread.start()
    metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 2, "two requests")
    server.proc.send_signal(signal.SIGTERM)
    stream.rest()
    # vLLM 0.33.0 core.py:1713-1725 finishes them with FinishReason.ABORT: a last chunk without text
    assert stream.finish_reasons()[-1] == "abort" and stream.texts()[-1] == ""
    sent = len([t for t in stream.texts() if t])
    assert 1 <= sent < 200 and stream.usage()["completion_tokens"] == sent and stream.events[-1] == "[DONE]"
    thread.join(EVENT_TIMEOUT_S)
    status, doc = answers[0]
    assert status == 200 and doc["choices"][0]["finish_reason"] == "abort"
    assert doc["usage"]["completion_tokens"] == len(doc["choices"][0]["text"].split()) < 200
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert "SIGTERM: stopping (vLLM's shutdown mode=abort timeout=0s)" in server.output()
    assert "[shutdown] EngineCore: aborting in-flight requests count=2" in server.output()


def test_a_drain_that_runs_out_of_time_aborts_what_is_left(start):  # noqa: F811
    server, metrics = serve(start, "--shutdown-timeout=1", tpot_ms=100)
    stream = Stream(server.port, 300, "qwen")  # 30 s of tokens, far past the timeout
    assert json.loads(stream.next())["choices"][0]["text"]
    server.proc.send_signal(signal.SIGTERM)
    stream.rest()
    assert stream.finish_reasons()[-1] == "abort" and len([t for t in stream.texts() if t]) < 300
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert "drain timed out after 1s: aborting 1 request(s) still in flight" in server.output()


def test_vllm_before_0_18_has_no_shutdown_timeout_and_stops_as_uvicorn_does(start):  # noqa: F811
    port = free_port()
    refused_flag = start([*serve_args(port), "--shutdown-timeout", "5"], [0], port=port,
                         env={"STANDIN_VLLM_ASCEND_VERSION": "v0.13.0"})
    assert refused_flag.proc.wait(timeout=EVENT_TIMEOUT_S) == 2  # argparse: not an option of vLLM 0.13.0
    assert "unrecognized arguments: --shutdown-timeout 5" in refused_flag.output()
    server, metrics = serve(start, release="v0.13.0")
    stream = in_background(lambda: Stream(server.port, 60, "qwen"))
    metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 1, "a stream")
    server.proc.send_signal(signal.SIGTERM)
    wait_refused(server.port)
    assert len(finished(stream).texts()) == 60
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert "uvicorn's graceful shutdown" in server.output()
