"""Steady streaming load through a front while the test changes the deployment behind it.

The load starts before the change (entering waits for its first answered request), keeps sending until the test
stops it after the change has returned, then lets every request in flight end: so it spans the change by
construction, however long the change takes on a loaded machine, and no fixed request count has to outlast it.
Each request is a streamed /v1/completions of a few tokens; it failed unless it got HTTP 200, a chunk with a
`finish_reason`, and `data: [DONE]` (vLLM's OpenAI server ends every stream so: vllm/entrypoints/openai/
serving_completion.py, completion_stream_generator).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from deployctl.bench.client import FAILED_FINISH  # what bench counts failed, counted so here

READ_TIMEOUT_S = 120  # one request's bound; a request that waits longer has failed


@dataclass
class Sent:
    """One request: when it was sent (monotonic), and its error (None: answered in full)."""

    at: float
    error: Optional[str] = None
    done: bool = False
    chunks: int = 0
    finish_reason: Optional[str] = None  # the last chunk's, as vLLM sent it ("length", "stop", "abort", ...)


def stream(host: str, port: int, model: str, tokens: int, record: Sent, on_chunk=None,
           ignore_eos: bool = False) -> None:
    """One streamed /v1/completions; `record` says when it ended, its error (None: answered in full), its chunks
    and finish_reason; `on_chunk` is called at each chunk. `ignore_eos`: exactly `tokens` tokens (vLLM's
    SamplingParams), however early the model would stop."""
    request = {"model": model, "prompt": "hello " * 16, "max_tokens": tokens, "temperature": 0, "stream": True}
    body = json.dumps({**request, "ignore_eos": True} if ignore_eos else request)
    connection = http.client.HTTPConnection(host, port, timeout=READ_TIMEOUT_S)
    try:
        connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            record.error = f"HTTP {response.status}: {response.read(300)!r}"
            return
        finished, done = False, False
        for line in response:
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
                break
            if line.startswith(b"data: "):
                chunk = json.loads(line[6:])
                record.chunks += 1
                if on_chunk:
                    on_chunk()
                reasons = [c.get("finish_reason") for c in chunk.get("choices", ()) if c.get("finish_reason")]
                record.finish_reason = reasons[-1] if reasons else record.finish_reason
                aborted = next((r for r in reasons if r in FAILED_FINISH), None)
                if aborted:  # vLLM ends a request it cut (SIGTERM) with "abort" in a 200 stream, then [DONE]
                    record.error = f"the server ended the request: finish_reason {aborted}"
                finished = finished or bool(reasons)
        if record.error is None and not (finished and done):
            record.error = f"stream ended without {'[DONE]' if finished else 'a finish_reason'}"
    except (OSError, http.client.HTTPException, ValueError) as error:
        record.error = f"{type(error).__name__}: {error}"
    finally:
        connection.close()
        record.done = True


class SteadyLoad:
    """`rate` streamed requests a second through `url` until `stop()`; `summary(began, ended)` judges them."""

    def __init__(self, url: str, rate: float = 4.0, tokens: int = 16, model: str = "tiny") -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.interval, self.tokens, self.model = 1.0 / rate, tokens, model
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._first = threading.Event()
        self._workers: list[threading.Thread] = []
        self._sender = threading.Thread(target=self._send_loop, daemon=True)

    def __enter__(self) -> "SteadyLoad":
        self._sender.start()
        if not self._first.wait(120):
            self.stop()
            raise AssertionError(f"no request through {self.host}:{self.port} was answered in 120 s: "
                                 f"{self.errors()}")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _send_loop(self) -> None:
        next_at = time.monotonic()
        while not self._stopping.is_set():
            record = Sent(time.monotonic())
            with self._lock:
                self.sent.append(record)
            worker = threading.Thread(target=self._one, args=(record,), daemon=True)
            self._workers.append(worker)
            worker.start()
            next_at += self.interval
            self._stopping.wait(max(0.0, next_at - time.monotonic()))

    def _one(self, record: Sent) -> None:
        stream(self.host, self.port, self.model, self.tokens, record)
        if record.error is None:
            self._first.set()

    def stop(self) -> None:
        """Send no more, and wait (bounded) for every request in flight to end."""
        self._stopping.set()
        if self._sender.is_alive():
            self._sender.join(timeout=30)
        for worker in list(self._workers):
            worker.join(timeout=READ_TIMEOUT_S + 5)

    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in list(self.sent):
            if record.error is not None:
                counts[record.error] = counts.get(record.error, 0) + 1
        return counts

    def summary(self, began: float, ended: float) -> dict:
        """requests and failed (all), `during`: those sent while the change ran (between `began` and `ended`)."""
        with self._lock:
            sent = list(self.sent)
        assert all(record.done for record in sent), "requests still in flight after stop()"
        return {"requests": len(sent), "failed": sum(record.error is not None for record in sent),
                "during": sum(began <= record.at <= ended for record in sent), "errors": self.errors()}


class HeldRequest:
    """One streamed completion of `tokens` tokens sent straight to a server: entering waits for its first chunk (it
    is in flight then, counted by the server's `vllm:num_requests_running`); `cut` says how it ended (None while
    it runs; the error when it ended without a finish_reason and `[DONE]`, "" when answered in full)."""

    def __init__(self, url: str, tokens: int, model: str = "tiny", ignore_eos: bool = False) -> None:
        parts = urlsplit(url)
        self._where = (parts.hostname, parts.port or 80, model, tokens)
        self._ignore_eos = ignore_eos
        self._record = Sent(time.monotonic())
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "HeldRequest":
        self._thread.start()
        if not self._started.wait(120) or self._record.done:
            raise AssertionError(f"the held request never streamed: {self._record.error}")
        return self

    def __exit__(self, *exc) -> None:
        self._thread.join(timeout=READ_TIMEOUT_S + 5)

    def _run(self) -> None:
        stream(*self._where, self._record, on_chunk=self._started.set, ignore_eos=self._ignore_eos)
        self._started.set()

    @property
    def cut(self) -> Optional[str]:
        if not self._record.done:
            return None
        return self._record.error or ""

    @property
    def chunks(self) -> int:
        return self._record.chunks

    @property
    def finish_reason(self) -> Optional[str]:
        return self._record.finish_reason
