"""vllm-ascend's P/D proxy changing its lists while it serves (POST /instances/add|remove, GET /healthcheck), as
each release's load_balance_proxy_server_example.py does it (standin/proxy_pool.py), on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time

import pytest
from tests.images.test_vllm_ascend_standin import (  # noqa: F401 (fixtures)
    EVENT_TIMEOUT_S, PROXY, free_run, kv_config, metric, serve_args, start, weights,
)
from tests.ports import free_port, free_ports

LOOP = "127.0.0.1"
RETRY = ["--waiting-retry-interval", "0.05"]  # the node listener's period (upstream default 10 s)


@pytest.fixture
def servers(start):
    """One prefill and two decode servers, each its own engine (dp 1, tp 1); the decoders stream a token each
    10 ms, so a request of 400 tokens is in flight for about 4 s."""
    return make_servers(start)


def make_servers(start, prefill_env=None):  # noqa: F811
    p_api, d0, d1 = free_ports(3)
    sizes = {"prefill": (1, 1), "decode": (1, 1)}
    prefill = start(serve_args(p_api, kv=kv_config("kv_producer", free_run(1), "dep-prefill0", **sizes)), [0],
                    port=p_api, env=prefill_env)
    decodes = [start(serve_args(api, kv=kv_config("kv_consumer", free_run(1), f"dep-decode{i}", **sizes)), [1 + i],
                     port=api, env={"STANDIN_TPOT_MS": "10"}) for i, api in enumerate((d0, d1))]
    for proc in (prefill, *decodes):
        proc.wait_line("startup complete: serving on")
    return prefill, decodes


def run_proxy(start, prefill, decodes, version=None, extra=()):
    port = free_port()
    args = ["--host", LOOP, "--port", port, "--prefiller-hosts", LOOP, "--prefiller-ports", prefill.port,
            "--decoder-hosts", *([LOOP] * len(decodes)), "--decoder-ports", *(d.port for d in decodes), *extra]
    proxy = start(args, command=PROXY, port=port,
                  env={"STANDIN_VLLM_ASCEND_VERSION": version} if version else None)
    proxy.wait_line("startup complete: proxy serving on")
    return proxy


def adjust(proxy, mode, kind, instances):
    status, answer = proxy.json("POST", f"/instances/{mode}", {"type": kind, "instances": instances})
    assert status == 200, answer
    return answer


def where(proxy, count=2, tokens=1):
    """The decoders (ports) that `count` new requests went to, from the proxy's trace."""
    before = len(proxy.json("GET", "/standin/trace")[1])
    for _ in range(count):
        status, _ = proxy.request("POST", "/v1/completions", {"model": "qwen", "prompt": "a b", "max_tokens": tokens})
        assert status == 200
    records = proxy.json("GET", "/standin/trace")[1][before:]
    return [int(r["backends"][1].rsplit(":", 1)[1]) for r in records]


def wait_health(proxy, **wanted):
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while True:
        doc = proxy.json("GET", "/healthcheck")[1]
        if all(doc.get(k) == v for k, v in wanted.items()):
            return doc
        assert time.monotonic() < deadline, f"healthcheck never {wanted}: {doc}"
        time.sleep(0.02)  # a poll interval


def in_flight(proxy, decode, tokens=400):
    """Start a streamed request through the proxy and return once its first bytes came back through the proxy
    from `decode`; join() the returned thread for (status, body)."""
    result, streaming = [], threading.Event()
    body = json.dumps({"model": "qwen", "prompt": "long one", "max_tokens": tokens, "stream": True})

    def client():
        conn = http.client.HTTPConnection(LOOP, proxy.port, timeout=EVENT_TIMEOUT_S)
        try:
            conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            first = response.read(16)
            streaming.set()
            result.append((response.status, first + response.read()))
        finally:
            streaming.set()
            conn.close()

    thread = threading.Thread(target=client)
    thread.result = result
    thread.start()
    assert streaming.wait(EVENT_TIMEOUT_S)
    assert metric(decode, "vllm:num_requests_running") == 1
    return thread


def completed(thread, tokens=400):
    thread.join(EVENT_TIMEOUT_S)
    status, data = thread.result[0]
    events = [e[len("data: "):] for e in data.decode().split("\n\n") if e]
    assert status == 200 and events[-1] == "[DONE]"
    assert sum(1 for e in events[:-1] if json.loads(e)["choices"][0]["text"]) == tokens
    return True


def test_remove_and_add_change_where_new_requests_go(servers, start):
    prefill, decodes = servers
    d0, d1 = (d.port for d in decodes)
    proxy = run_proxy(start, prefill, decodes, extra=RETRY)
    assert sorted(where(proxy)) == sorted([d0, d1])  # round robin over both
    # nothing in flight: removed at once (v0.23.0 remove_instances :464-484)
    assert adjust(proxy, "remove", "decode", f"{LOOP}:{d1}") == {
        "message": f"remove decode instances: ['{LOOP}:{d1}'].",
        "current_prefill_instances": [f"{LOOP}:{prefill.port}"], "current_decode_instances": [f"{LOOP}:{d0}"]}
    assert proxy.json("GET", "/healthcheck")[1] == {"status": "ok", "prefill_instances": 1, "decode_instances": 1,
                                                    "request_num": 0}
    assert where(proxy) == [d0, d0]
    # v0.23.0 add_instances :429-439: an add always waits for the listener's next GET /v1/models
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{d1}"]) == {
        "message": f"Instances ['{LOOP}:{d1}'] are waiting to be added.",
        "current_prefill_instances": [f"{LOOP}:{prefill.port}"], "current_decode_instances": [f"{LOOP}:{d0}"]}
    wait_health(proxy, decode_instances=2)
    assert sorted(where(proxy)) == sorted([d0, d1])
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{d1}"])["message"] == f"add decode instances: ['{LOOP}:{d1}']."
    assert adjust(proxy, "add", "router", [f"{LOOP}:{d1}"]) == {
        "error": "Instance type 'router' is not supported. Only 'prefill' and 'decode' are allowed."}
    assert proxy.request("POST", "/instances/add", {"type": "decode", "instances": ["no-port"]}) == (
        500, b"Internal Server Error")  # the upstream handler raises on an address without a port


def test_a_removed_decoder_finishes_its_request_in_flight_and_gets_no_new_ones(servers, start):
    prefill, decodes = servers
    d0, d1 = (d.port for d in decodes)
    proxy = run_proxy(start, prefill, decodes, extra=RETRY)
    stream = in_flight(proxy, decodes[0])  # round robin: the first request goes to the first decoder
    # a request in flight: the instance is tainted, still listed, and picked only when no other is left
    assert adjust(proxy, "remove", "decode", [f"{LOOP}:{d0}"])["message"] == (
        f"Instances ['{LOOP}:{d0}'] are isolated and waiting to be removed.")
    assert proxy.json("GET", "/healthcheck")[1]["decode_instances"] == 2
    assert proxy.json("GET", "/healthcheck")[1]["request_num"] == 1
    assert where(proxy) == [d1, d1]
    # v0.23.0 skips an add of an instance still listed: re-adding a tainted one leaves it tainted
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{d0}"])["message"] == f"add decode instances: ['{LOOP}:{d0}']."
    assert where(proxy) == [d1, d1]
    assert completed(stream)
    wait_health(proxy, decode_instances=1, request_num=0)  # the listener's next round with nothing in flight
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{d0}"])["message"] == (
        f"Instances ['{LOOP}:{d0}'] are waiting to be added.")
    wait_health(proxy, decode_instances=2)


def test_v0_18_counts_a_request_only_until_its_decode_starts_and_checks_an_add_at_once(servers, start):
    prefill, decodes = servers
    d0, d1 = (d.port for d in decodes)
    proxy = run_proxy(start, prefill, decodes, version="v0.18.0", extra=[*RETRY, "--max-waiting-retries", "1000"])
    assert "request_num" not in proxy.json("GET", "/healthcheck")[1]
    stream = in_flight(proxy, decodes[0])
    # v0.18.0 uncounts the request when its handler returns, before the decoder streams (:712, :829): removed at once
    answer = adjust(proxy, "remove", "decode", [f"{LOOP}:{d0}"])
    assert answer["message"] == f"remove decode instances: ['{LOOP}:{d0}']."
    assert where(proxy) == [d1, d1]
    assert completed(stream)
    # v0.18.0 add_instances :325-339: an instance that serves is added at once ...
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{d0}"])["current_decode_instances"] == [f"{LOOP}:{d1}",
                                                                                            f"{LOOP}:{d0}"]
    # ... one that does not yet waits, and the listener adds it once it serves
    later = free_port()
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{later}"])["message"] == (
        f"add decode instances: []. Instances ['{LOOP}:{later}'] are waiting to be added.")
    late = start(serve_args(later, kv=kv_config("kv_consumer", free_run(1), "dep-decode2",
                                                prefill=(1, 1), decode=(1, 1))), [3], port=later)
    late.wait_line("startup complete: serving on")
    wait_health(proxy, decode_instances=3)
    assert adjust(proxy, "add", "decode", [f"{LOOP}:{free_port()}"])["message"].endswith("are waiting to be added.")


def test_an_instance_that_never_serves_is_dropped_after_the_retries(servers, start):
    prefill, decodes = servers
    proxy = run_proxy(start, prefill, decodes, extra=[*RETRY, "--max-waiting-retries", "2"])
    never = free_port()
    adjust(proxy, "add", "prefill", [f"{LOOP}:{never}"])
    proxy.wait_line(f"Instance 0.0.0.0:{never} was not added to the proxy.")  # v0.23.0 :589-591 (its key)
    assert proxy.json("GET", "/healthcheck")[1]["prefill_instances"] == 1


@pytest.mark.parametrize("version", ["v0.11.0", "v0.11.0rc1"])
def test_releases_before_the_instances_api_answer_404(servers, start, version):
    prefill, decodes = servers
    proxy = run_proxy(start, prefill, decodes, version=version)
    for mode in ("add", "remove"):
        assert proxy.json("POST", f"/instances/{mode}", {"type": "decode", "instances": [f"{LOOP}:1"]}) == (
            404, {"detail": "Not Found"})
    assert proxy.json("GET", "/healthcheck") == (200, {"status": "ok", "prefill_instances": 1,
                                                       "decode_instances": 2})


def test_sigterm_stops_the_proxy_as_uvicorn_does_after_the_relays_in_flight(servers, start):
    prefill, decodes = servers
    proxy = run_proxy(start, prefill, decodes)
    stream = in_flight(proxy, decodes[0])
    proxy.proc.send_signal(signal.SIGTERM)
    proxy.wait_line("standin: waiting for 1 connection(s) to close")
    assert not proxy.listening()  # uvicorn closed its listening socket: new connections are refused
    assert completed(stream)
    assert proxy.proc.wait(timeout=EVENT_TIMEOUT_S) == 0
    assert proxy.output().splitlines()[-1] == "standin: shutting down"


@pytest.mark.parametrize("version, picked_again", [("v0.18.0", True), ("v0.23.0", False)])
def test_before_v0_21_a_tainted_decoder_is_picked_again_once_a_request_on_it_ends(start, version, picked_again):
    # every prefill takes 1 s, so a request counts in request_num for that long even on v0.18.0
    prefill, decodes = make_servers(start, {"STANDIN_TTFT_MS": "1000"})
    d0, d1 = (d.port for d in decodes)
    # a listener that never runs in this test: the tainted instance stays listed
    proxy = run_proxy(start, prefill, decodes, version=version, extra=["--waiting-retry-interval", "1000"])
    stream = in_flight(proxy, decodes[0])  # decoding on d0
    in_prefill = threading.Thread(target=lambda: proxy.request("POST", "/v1/completions",
                                                               {"model": "qwen", "prompt": "x", "max_tokens": 1}))
    in_prefill.start()
    wait_running(prefill)
    assert adjust(proxy, "remove", "decode", [f"{LOOP}:{d0}"])["message"].endswith(
        "are isolated and waiting to be removed.")
    in_prefill.join(EVENT_TIMEOUT_S)
    assert completed(stream)  # its end rewrites d0's heap entry on v0.18.0 (_update_decoder_priority)
    assert (d0 in where(proxy)) is picked_again
    assert proxy.json("GET", "/healthcheck")[1]["decode_instances"] == 2


def wait_running(server) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while metric(server, "vllm:num_requests_running") != 1:
        assert time.monotonic() < deadline, "the prefill never started"
        time.sleep(0.01)  # a poll interval
