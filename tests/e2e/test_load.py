"""tests/e2e/load.py's judge of one streamed request, against a real HTTP server on loopback (no test bed)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.e2e.load import Sent, stream


def serve(reason: str, requests: list | None = None) -> ThreadingHTTPServer:
    """A server answering every POST with two chunks, the last with `reason`; each request's body into `requests`."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if requests is not None:
                requests.append(sent)
            body = (b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'
                    b'data: {"choices": [{"text": "", "finish_reason": "%s"}]}\n\ndata: [DONE]\n\n' % reason.encode())
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("reason, error", [
    ("length", None), ("stop", None),
    # vLLM ends a request it cut on SIGTERM with finish_reason "abort" (then [DONE]): a load that counted it
    # answered could not see a rollout that drops requests
    ("abort", "the server ended the request: finish_reason abort"),
    ("error", "the server ended the request: finish_reason error")])
def test_a_stream_is_answered_only_when_it_finished_for_a_reason_that_is_an_answer(reason, error):
    server = serve(reason)
    try:
        record = Sent(time.monotonic())
        stream("127.0.0.1", server.server_address[1], "tiny", 4, record)
        assert (record.done, record.error, record.finish_reason, record.chunks) == (True, error, reason, 2)
    finally:
        server.shutdown()


def test_ignore_eos_is_sent_only_when_asked():
    requests: list = []
    server = serve("length", requests)
    try:
        for ignore_eos in (False, True):
            stream("127.0.0.1", server.server_address[1], "tiny", 4, Sent(time.monotonic()), ignore_eos=ignore_eos)
        assert [r.get("ignore_eos") for r in requests] == [None, True]
    finally:
        server.shutdown()
