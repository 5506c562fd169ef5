"""The answer check's host program and its handler, through the local transport against a small HTTP server on
loopback that speaks the KV-connector hand-over (a prefill returns kv_transfer_params, a decode needs them)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployctl.errors import HostError
from deployctl.execute.answers import run_answer_check
from deployctl.plan.actions import AnswerCheck
from deployctl.plan.answers import AnswerPath
from deployctl.transport.local import LocalTransport

PARAMS = {"do_remote_prefill": True, "remote_engine_id": "prefill-0", "remote_host": "127.0.0.1", "remote_port": 1}


class Handler(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, body))
        if self.path == "/prefill/v1/completions":
            assert body["max_tokens"] == 1 and body["kv_transfer_params"]["do_remote_decode"] is True
            return self.answer(200, {"choices": [{"text": " a"}], "kv_transfer_params": PARAMS})
        if self.path.startswith("/decode"):
            if body.get("kv_transfer_params") != PARAMS:
                return self.answer(400, {"object": "error", "message": "needs kv_transfer_params"})
            text = " alpha bravo" if self.path == "/decode/v1/completions" else " kilo lima"
            return self.answer(200, {"choices": [{"text": text}]})
        if self.path == "/empty/v1/completions":
            return self.answer(200, None)
        return self.answer(200, {"choices": [{"message": {"content": " alpha bravo"}}]})

    def answer(self, status, doc):
        data = json.dumps(doc).encode() if doc is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    Handler.seen = []
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def check(*paths):
    return AnswerCheck(tuple(paths), 2, 10.0)


def test_a_pair_is_prefilled_then_decoded_with_the_prefills_params_and_agreeing_paths_pass(server):
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": 2, "temperature": 0, "stream": False})
    texts = run_answer_check(LocalTransport(), check(
        AnswerPath("p0 -> d0", f"{server}/decode/v1/completions", body, prefill_url=f"{server}/prefill/v1/completions"),
        AnswerPath("proxy", f"{server}/proxy/v1/completions", body)))
    assert texts == (" alpha bravo", " alpha bravo")
    decode = next(b for path, b in Handler.seen if path.startswith("/decode"))
    assert decode["kv_transfer_params"] == PARAMS and decode["max_tokens"] == 2


def test_a_differing_pair_and_an_empty_200_fail_naming_each_path(server):
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": 2})
    with pytest.raises(HostError) as caught:
        run_answer_check(LocalTransport(), check(
            AnswerPath("p0 -> d0", f"{server}/decode/v1/completions", body, f"{server}/prefill/v1/completions"),
            AnswerPath("p0 -> d1", f"{server}/decode-odd/v1/completions", body, f"{server}/prefill/v1/completions"),
            AnswerPath("proxy", f"{server}/proxy/v1/completions", body),
            AnswerPath("empty", f"{server}/empty/v1/completions", body),
            AnswerPath("nobody", "http://127.0.0.1:9/v1/completions", body)))
    error = caught.value
    assert error.message.startswith("local: answer check: empty: HTTP 200 with no body (and 2 more)")
    problems = error.stderr_tail.splitlines()
    assert problems[0] == "empty: HTTP 200 with no body"
    assert problems[1].startswith("nobody: no answer (URLError")
    assert problems[2] == "p0 -> d1: answered ' kilo lima' where 2 other path(s) answered ' alpha bravo'"


def test_a_refusal_is_quoted_by_its_message_flat_or_nested_as_vllm_writes_it():
    """vLLM's OpenAI server nests the error since 0.10.1 (vllm #22099): the check quoted the whole dict."""
    from deployctl.execute.ask_answers import error_of

    nested = {"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "param": "model",
                        "code": 404}}
    assert error_of(json.dumps(nested).encode()) == "The model `x` does not exist."
    assert error_of(json.dumps({"object": "error", "message": "flat words", "code": 400}).encode()) == "flat words"
    assert error_of(b"not json") == "not json"
