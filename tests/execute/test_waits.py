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
def server(loopback_server):
    """A loopback server: /health answers 503 for its first `busy` asks, then 200; /metrics holds 2 running
    requests for its first `busy` asks, then none. Yields (port, state)."""
    return loopback_server(3)


@pytest.fixture
def loopback_server():
    """Starts such servers, each busy for its own number of asks; all stopped at the end."""
    started = []

    def start(busy: int) -> tuple[int, dict]:
        port, state, httpd = _serve(busy)
        started.append(httpd)
        return port, state

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def _serve(busy: int):
    state = {"busy": busy, "health": 0, "metrics": 0}

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
    return httpd.server_address[1], state, httpd


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
    assert left == {} and transport.round_trips == 1 and state["metrics"] >= 4


def test_a_round_trip_asks_at_most_its_tries_then_says_what_it_saw(server):
    port, state = server
    state["busy"] = 100
    transport = Counting()
    progress = []
    left = run_drain(transport, Drain((("s", f"http://127.0.0.1:{port}/metrics"),), 0), poll_interval=0.15,
                     cancel=threading.Event(), on_progress=progress.append)
    assert left == {"s": 2.0} and transport.round_trips == 1 and state["metrics"] == 4  # 3 tries + the page


def _drain(*servers: tuple[str, int], timeout: float, poll_interval: float = 0.5, transport=None):
    return run_drain(transport or Counting(), Drain(tuple((n, f"http://127.0.0.1:{p}/metrics") for n, p in servers),
                                                    timeout),
                     poll_interval=poll_interval, cancel=threading.Event(), on_progress=lambda line: None)


@pytest.mark.parametrize("busy_first", [True, False])
def test_a_drain_of_several_servers_ends_when_the_last_is_empty_not_the_first(loopback_server, busy_first):
    """One server empty from the start, one busy for 30 asks (3 round trips of 10): the drain waits for both."""
    (empty, _), (busy, state) = loopback_server(0), loopback_server(30)
    servers = [("empty", empty), ("busy", busy)]
    left = _drain(*(servers[::-1] if busy_first else servers), timeout=600)
    assert left == {} and state["metrics"] > 30  # asked until it held nothing


@pytest.mark.parametrize("busy_first", [True, False])
def test_a_drain_of_several_servers_at_its_deadline_names_the_one_still_busy(loopback_server, busy_first):
    (empty, _), (busy, _) = loopback_server(0), loopback_server(10**6)
    servers = [("empty", empty), ("busy", busy)]
    assert _drain(*(servers[::-1] if busy_first else servers), timeout=0, poll_interval=0.15) == {"busy": 2.0}


def test_one_round_trip_asks_until_every_server_is_empty(loopback_server):
    """On the host too (the script's loop): one empty server does not end the asking while another holds some."""
    (empty, _), (busy, state) = loopback_server(0), loopback_server(3)
    transport = Counting()
    assert _drain(("busy", busy), ("empty", empty), timeout=600, transport=transport) == {}
    assert transport.round_trips == 1 and state["metrics"] == 5  # 3 busy answers, the empty one, the page
