"""A graceful stop of the real vLLM engine: with `server_version` naming the image's vLLM (0.32.0, past 0.18.0),
deployctl starts it with `--shutdown-timeout 30`, and `down` (`docker stop --time 30`) lets a streaming request in
flight finish; without the flag vLLM's SIGTERM aborts it (the control)."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from tests.e2e.conftest import container_ids
from tests.real_engine.conftest import HOST, real_spec

pytestmark = pytest.mark.real_engine

NAME = "re-stop"
PORT = 8630


class Streaming:
    """One long streamed completion on a thread: `first` is set at its first chunk; `result()` says how it ended."""

    def __init__(self, port: int = PORT) -> None:
        self.port = port
        self.first = threading.Event()
        self.chunks, self.finish_reason, self.done, self.error = 0, None, False, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        body = json.dumps({"model": "tiny", "prompt": "hello " * 16, "max_tokens": 400, "temperature": 0,
                           "ignore_eos": True, "stream": True})
        connection = http.client.HTTPConnection("10.200.0.11", self.port, timeout=120)
        try:
            connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            for line in response:
                line = line.strip()
                if line == b"data: [DONE]":
                    self.done = True
                elif line.startswith(b"data: "):
                    choices = json.loads(line[6:]).get("choices", ())
                    self.chunks += 1
                    self.first.set()
                    self.finish_reason = next((c["finish_reason"] for c in choices if c.get("finish_reason")),
                                              self.finish_reason)
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.error = repr(error)
        finally:
            connection.close()
            self.first.set()

    def result(self) -> tuple:
        self.thread.join(150)
        assert not self.thread.is_alive()
        return self.finish_reason, self.done, self.error


def deploy_stream_and_down(bed, deployctl, server_version, pause: bool = False) -> tuple[tuple, list, int]:
    """up, one long stream started, down while it streams: (how it ended, the server's argv, chunks at down).
    `pause`: the engine core SIGSTOPped first, so the request is surely still running at SIGTERM however fast the
    machine (a quiet one finished all 400 tokens before `down` reached the server)."""
    path = deployctl.write(real_spec(bed, NAME, (PORT,), server_version=server_version), name=f"{NAME}.yaml")
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        argv = json.loads(bed.docker_on(HOST, "inspect", f"{NAME}-mixed-0").stdout)[0]["Args"]
        stream = Streaming()
        assert stream.first.wait(120) and stream.error is None, stream.error
        if pause:
            from tests.real_engine.test_watch import stop_engine_core

            assert stop_engine_core(bed, f"{NAME}-mixed-0")
        at_down = stream.chunks
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        return stream.result(), argv, at_down
    finally:
        deployctl("down", path, "--yes")
        assert container_ids(bed, HOST, NAME) == {}


def test_down_lets_a_request_in_flight_finish_within_the_shutdown_timeout_and_without_it_vllm_aborts(real_bed,
                                                                                                    deployctl):
    (reason, done, error), argv, at_down = deploy_stream_and_down(real_bed, deployctl, "0.32.0")
    assert argv[argv.index("--shutdown-timeout") + 1] == "30"
    assert at_down < 400  # it was still streaming when down began
    assert (reason, done, error) == ("length", True, None)  # all 400 tokens, then [DONE]

    (reason, done, error), argv, _ = deploy_stream_and_down(real_bed, deployctl, None, pause=True)
    assert "--shutdown-timeout" not in argv
    assert (reason, done) != ("length", True), "vLLM without --shutdown-timeout aborts what runs at SIGTERM"
