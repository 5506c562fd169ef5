"""Stand-in servers run as local processes on 127.0.0.1 (no test bed needed)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.ports import free_port

STANDIN = Path(__file__).resolve().parents[2] / "images" / "standin"


class Standin:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def trace(self) -> dict:
        """The server's ground truth, by request id."""
        status, records = self.call("GET", "/standin/trace")
        assert status == 200
        return {r["id"]: r for r in records}

    def clear_trace(self) -> None:
        self.call("DELETE", "/standin/trace")


@pytest.fixture
def standin(tmp_path):
    """start(ttft_ms=..., tpot_ms=..., name=...) -> a running stand-in; stopped at the end of the test."""
    started = []
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                     "max_position_embeddings": 8192}))
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("davinci0", "davinci_manager", "devmm_svm", "hisi_hdc"):
        (dev / name).touch()

    def start(ttft_ms: float = 0, tpot_ms: float = 0, name: str = "m", extra_env=None) -> Standin:
        port = free_port()
        log = tmp_path / f"standin-{port}.log"
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDIN), "PYTHONDONTWRITEBYTECODE": "1",
               "STANDIN_STARTUP_S": "0", "STANDIN_DEV_DIR": str(dev), "STANDIN_TTFT_MS": str(ttft_ms),
               "STANDIN_TPOT_MS": str(tpot_ms), **(extra_env or {})}
        args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights),
                "--tensor-parallel-size", "1", "--max-model-len", "8192", "--max-num-batched-tokens", "8192",
                "--host", "127.0.0.1", "--port", str(port), "--served-model-name", name]
        with open(log, "w") as out:
            proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
        server = Standin(proc, port, log)
        started.append(server)
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"stand-in exited {proc.returncode}:\n{log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return server
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.02)

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.terminate()
            server.proc.wait(timeout=5)
