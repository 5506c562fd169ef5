"""The executor's waits ask on the host itself, TICK_S apart, for about a poll period per round trip
(execute/health.py HEALTH_SCRIPT, facts/in_flight.py IN_FLIGHT_SCRIPT): a server that comes up, or drains, in the
middle of a round trip is seen in that round trip, not one poll period later. Run for real (sh, curl) against a
loopback server whose answers change after a number of requests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployctl.execute.drain import run_drain
from deployctl.execute.health import tries, wait_healthy
from deployctl.plan.actions import Drain
from deployctl.plan.model import HealthCheck
from deployctl.transport.local import LocalTransport


@pytest.fixture
def server():
    """A loopback server: /health answers 503 for its first `busy` asks, then 200; /metrics holds 2 running
    requests for its first `busy` asks, then none. Yields (port, state)."""
    state = {"busy": 3, "health": 0, "metrics": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            kind = self.path.strip("/")
            state[kind] = state.get(kind, 0) + 1
            early = state[kind] <= state["busy"]
            if kind == "health":
                code, body = (503 if early else 200), b""
            else:
                code, body = 200, f"vllm:num_requests_running {2.0 if early else 0.0}\n".encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], state
    httpd.shutdown()
    httpd.server_close()


class Counting(LocalTransport):
    def __init__(self) -> None:
        super().__init__("local")
        self.round_trips = 0

    def run(self, command, *, timeout=None):
        self.round_trips += 1
        return super().run(command, timeout=timeout)


def test_a_health_wait_sees_the_first_200_within_the_round_trip_that_asks(server):
    port, state = server
    transport = Counting()
    wait_healthy(transport, HealthCheck("c", port, "/health"), timeout=30, poll_interval=0.5,
                 cancel=threading.Event(), on_progress=lambda line: None)
    assert transport.round_trips == 1 and state["health"] == 4  # 3 x 503 and the 200, all in one round trip
    assert tries(0.5) == 10 and tries(0.01) == 1


def test_a_drain_sees_its_servers_empty_within_the_round_trip_that_asks(server):
    port, state = server
    transport = Counting()
    left = run_drain(transport, Drain((("s", f"http://127.0.0.1:{port}/metrics"),), 30), poll_interval=0.5,
                     cancel=threading.Event(), on_progress=lambda line: None)
    assert left == "" and transport.round_trips == 1 and state["metrics"] >= 4


def test_a_round_trip_asks_at_most_its_tries_then_says_what_it_saw(server):
    port, state = server
    state["busy"] = 100
    transport = Counting()
    progress = []
    left = run_drain(transport, Drain((("s", f"http://127.0.0.1:{port}/metrics"),), 0), poll_interval=0.15,
                     cancel=threading.Event(), on_progress=progress.append)
    assert left == "s: 2 request(s)" and transport.round_trips == 1 and state["metrics"] == 4  # 3 tries + the page
