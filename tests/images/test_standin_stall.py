"""The stand-in's stall modes (images/standin/standin/stall.py), run as local processes on 127.0.0.1: a hang (requests
accepted and queued as waiting, tokens in flight stop, /health 200) after N requests or at run time; the engine
core's death (/health 503, generate 500, /metrics frozen, the API server exits after the watchdog's 5 s unless
VLLM_KEEP_ALIVE_ON_ENGINE_DEATH). Waits are for events (a /metrics value, a thread's end, the process' exit) with a
deadline, never sleeps."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

from tests.images.test_standin import MIXED, dev_dir, launch, vllm_args, weights  # noqa: F401 (fixtures)
from tests.images.test_standin_capacity import EVENT_TIMEOUT_S, Metrics, body, parse_metrics
from tests.images.test_vllm_ascend_standin import serve_args, start  # noqa: F401 (fixture)
from tests.ports import free_port

RUNNING, WAITING, TOKENS = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total"


def server_with(launch, weights, tmp_path, env):  # noqa: F811
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0])), **env}
    return launch(MIXED, vllm_args(weights, port, 1), env, port), Metrics(port, "llama2-13b")


class Streamed:
    """A streamed completion read on its own thread: the status, every SSE event, and whether it ended."""

    def __init__(self, port: int, tokens: int, model: str = "llama2-13b") -> None:
        self.status = None
        self.error = None
        self.events: list[bytes] = []
        self.conn = None
        self.thread = threading.Thread(target=self._run, args=(port, {**body(tokens), "model": model}), daemon=True)
        self.thread.start()

    def _run(self, port: int, request: dict) -> None:
        conn = self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=EVENT_TIMEOUT_S * 3)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps(request).encode(),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            self.status = response.status
            self.events = [e for e in response.read().split(b"\n\n") if e.strip()]
        except (http.client.HTTPException, OSError) as exc:  # the server stopped under it (the test's end)
            self.error = exc
        finally:
            conn.close()

    def leave(self) -> None:
        """The client goes away mid-stream (a server stopping gracefully does not wait for it)."""
        self.conn.sock.shutdown(socket.SHUT_RDWR)

    def finished(self) -> bool:
        self.thread.join(EVENT_TIMEOUT_S)
        return not self.thread.is_alive()


def test_hang_after_n_requests_queues_as_waiting_with_health_200_until_resumed(launch, weights, tmp_path):  # noqa: F811
    server, metrics = server_with(launch, weights, tmp_path, {"STANDIN_HANG_AFTER_REQUESTS": "1"})
    status, doc = server.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "x", "max_tokens": 3})
    assert status == 200 and doc["usage"]["completion_tokens"] == 3
    hung = [Streamed(server.port, 4) for _ in range(2)]
    seen = metrics.wait_for(lambda m: m[WAITING] == 2, "2 waiting")
    assert (seen[RUNNING], seen[TOKENS]) == (0, 3)  # accepted, never scheduled; no token since
    assert server.request("GET", "/health")[0] == 200  # /health only asks check_health: still green
    assert server.json("GET", "/standin/stall") == (200, {"dead": False, "hung": ["0"]})
    assert "hanging every generation from now on (STANDIN_HANG_AFTER_REQUESTS=1)" in server.output()

    assert server.json("DELETE", "/standin/stall")[0] == 200
    assert all(h.finished() for h in hung)
    assert [h.status for h in hung] == [200, 200]
    assert metrics.wait_for(lambda m: m[TOKENS] == 11, "the queued requests' tokens")[WAITING] == 0


def test_a_hang_triggered_at_run_time_freezes_the_tokens_in_flight(launch, weights, tmp_path):  # noqa: F811
    server, metrics = server_with(launch, weights, tmp_path, {"STANDIN_TPOT_MS": "20"})
    long = Streamed(server.port, 2000)  # 40 s of tokens: in flight when the hang starts
    metrics.wait_for(lambda m: m[RUNNING] == 1 and m[TOKENS] > 0, "a request generating")
    assert server.json("POST", "/standin/stall", {"mode": "hang"}) == (200, {"dead": False, "hung": ["0"]})
    queued = Streamed(server.port, 2)
    first = metrics.wait_for(lambda m: m[WAITING] == 1, "the next request queued")
    also = Streamed(server.port, 2)
    later = metrics.wait_for(lambda m: m[WAITING] == 2, "a second one queued")
    # two round trips later no token went out: the one in flight stays running, stopped mid-stream
    assert (later[RUNNING], later[TOKENS]) == (1, first[TOKENS])
    assert server.request("GET", "/health")[0] == 200
    assert server.json("DELETE", "/standin/stall")[0] == 200
    assert queued.finished() and also.finished() and queued.status == 200
    assert metrics.wait_for(lambda m: m[TOKENS] > later[TOKENS], "tokens again")
    long.leave()
    assert long.finished()


def test_engine_dead_answers_503_and_500_with_metrics_frozen_while_kept_alive(launch, weights, tmp_path):  # noqa: F811
    server, metrics = server_with(launch, weights, tmp_path,
                                  {"STANDIN_TPOT_MS": "20", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"})
    streaming = Streamed(server.port, 2000)
    metrics.wait_for(lambda m: m[RUNNING] == 1 and m[TOKENS] > 0, "a request generating")
    assert server.json("POST", "/standin/stall", {"mode": "engine-dead"}) == (200, {"dead": True, "hung": []})
    frozen = metrics.read()
    assert server.request("GET", "/health")[0] == 503  # check_health raises EngineDeadError
    status, doc = server.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "x", "max_tokens": 3})
    assert (status, doc["message"], doc["type"]) == (
        500, "The server had an error while processing your request.", "InternalServerError")
    # the stream in flight ends with vLLM's error event, then [DONE]
    assert streaming.finished() and streaming.status == 200
    assert json.loads(streaming.events[-2][len(b"data: "):])["code"] == 500 and streaming.events[-1] == b"data: [DONE]"
    assert metrics.read() == frozen and frozen[RUNNING] == 1  # nothing updates the registry any more
    assert "engine core exited unexpectedly" not in server.output()  # the stand-in plays vLLM < 0.33 here
    assert "Engine core proc EngineCore_DP0 died unexpectedly" in server.output()
    assert server.proc.poll() is None


def test_engine_dead_after_n_requests_exits_after_the_watchdog(launch, weights, tmp_path):  # noqa: F811
    server, _ = server_with(launch, weights, tmp_path, {"STANDIN_ENGINE_DEAD_AFTER_REQUESTS": "1"})
    assert server.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "x", "max_tokens": 1})[0] == 200
    assert server.json("POST", "/v1/completions", {"model": "llama2-13b", "prompt": "x", "max_tokens": 1})[0] == 500
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 0  # uvicorn's shutdown returns: `vllm serve` exits 0
    assert "the API server shuts down (watchdog" in server.output()


def engine_values(proc) -> dict:
    """{(metric, engine index): value} of a vllm serve's /metrics."""
    status, data = proc.request("GET", "/metrics")
    assert status == 200
    return {(name, dict(labels)["engine"].strip('"')): value
            for (name, labels), value in parse_metrics(data.decode()).items() if "finished_reason" not in dict(labels)}


def wait_engines(proc, condition, what: str) -> dict:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while True:
        values = engine_values(proc)
        if condition(values):
            return values
        assert time.monotonic() < deadline, f"no {what} in /metrics: {values}"
        time.sleep(0.005)  # a poll interval, not a wait for time to pass


def test_vllm_serve_internal_dp_hangs_one_engine_the_other_serves(start):  # noqa: F811
    port = free_port()
    proc = start(serve_args(port, tp=1, dp=2, local=2, start_rank=0, rpc=free_port()), devices=(0, 1), port=port,
                 env={"STANDIN_VLLM_VERSION": "0.33.0", "STANDIN_TPOT_MS": "20"})
    proc.wait_line("startup complete")
    assert proc.json("POST", "/standin/stall", {"mode": "hang", "engine": "1"}) == (200, {"dead": False, "hung": ["1"]})
    assert proc.json("POST", "/standin/stall", {"mode": "hang", "engine": "7"})[0] == 400
    # vLLM's DP balancer places a request on the engine with the fewest waiting x 4 + running (first on ties):
    # a long one on engine 0, the next on the hung engine 1 (queued there), the third on engine 0 again
    long = Streamed(port, 2000, "qwen")
    wait_engines(proc, lambda v: v[(RUNNING, "0")] == 1, "engine 0 running")
    stuck = Streamed(port, 2, "qwen")
    wait_engines(proc, lambda v: v[(WAITING, "1")] == 1, "a request waiting on engine 1")
    quick = Streamed(port, 2, "qwen")
    assert quick.finished() and quick.status == 200
    values = engine_values(proc)
    assert (values[(WAITING, "1")], values[(RUNNING, "1")], values[(TOKENS, "1")]) == (1, 0, 0)
    assert proc.request("GET", "/health")[0] == 200
    assert proc.json("POST", "/standin/stall", {"mode": "engine-dead"})[0] == 200
    out = proc.wait_line("engine core exited unexpectedly")  # vLLM 0.33's monitor thread says it so
    assert "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup" in out
    assert long.finished() and stuck.finished() and stuck.status == 500
