"""The stand-in's emulated capacity (STANDIN_CAPACITY, STANDIN_LOAD_SLOWDOWN) and its vLLM-style /metrics, run as
a subprocess on 127.0.0.1. Waits are for events (a /metrics value, a thread's end) with a deadline, never sleeps;
timing asserts are never-early plus a generous upper bound (a busy 2-core machine wakes tasks late)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time

import pytest
from tests.images.test_standin import LATE_MS, MIXED, dev_dir, launch, vllm_args, weights  # noqa: F401 (fixtures)
from tests.ports import free_port

EVENT_TIMEOUT_S = 20
SLACK_MS = 1.0  # wall-clock (trace) against the event loop's clock: sub-millisecond apart
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
              "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens", "vllm:request_generation_tokens")
SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def parse_metrics(text: str) -> dict:
    """{(name, frozenset of label pairs): value}, checking every line is a comment or a well-formed sample."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(tuple(pair.split("=", 1)) for pair in match["labels"].split(","))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


class Metrics:
    def __init__(self, port: int, model: str) -> None:
        self.port, self.model = port, model

    def raw(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            return response.status, response.getheader("content-type"), response.read().decode()
        finally:
            conn.close()

    def read(self) -> dict:
        """{metric: value} of this model's engine-0 series (request_success as request_success_total:REASON)."""
        status, _, text = self.raw()
        assert status == 200, text
        values = {}
        for (name, labels), value in parse_metrics(text).items():
            if name.startswith(HISTOGRAMS):
                continue  # histograms(), below
            labels = dict(labels)
            assert labels["model_name"] == f'"{self.model}"' and labels["engine"] == '"0"', labels
            reason = labels.get("finished_reason")
            values[name + (":" + reason.strip('"') if reason else "")] = value
        return values

    def histograms(self) -> dict:
        """{name: ([(le, cumulative count)...], sum, count)} of engine 0's histograms."""
        status, _, text = self.raw()
        assert status == 200, text
        out = {name: ([], 0.0, 0.0) for name in HISTOGRAMS}
        for (name, labels), value in sorted(parse_metrics(text).items(), key=lambda item: str(item[0])):
            base = next((h for h in HISTOGRAMS if name.rsplit("_", 1)[0] == h), None)
            if base is None:
                continue
            buckets, total, count = out[base]
            labels = dict(labels)
            if name.endswith("_bucket"):
                buckets.append((labels["le"].strip('"'), value))
            out[base] = (buckets, value if name.endswith("_sum") else total,
                         value if name.endswith("_count") else count)
        return out

    def wait_for(self, condition, what: str) -> dict:
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while True:
            values = self.read()
            if condition(values):
                return values
            assert time.monotonic() < deadline, f"no {what} in /metrics: {values}"
            time.sleep(0.005)  # a poll interval, not a wait for time to pass


def send_in_background(port: int, rid: str, body: dict) -> threading.Thread:
    """A streamed request on its own connection, read to its end by a thread."""
    def run():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=EVENT_TIMEOUT_S)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                         headers={"Content-Type": "application/json", "X-Request-Id": rid})
            response = conn.getresponse()
            assert response.status == 200
            response.read()
        finally:
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def join_all(threads) -> None:
    for thread in threads:
        thread.join(EVENT_TIMEOUT_S)
        assert not thread.is_alive(), "a request did not finish"


def records(server) -> dict:
    status, doc = server.json("GET", "/standin/trace")
    assert status == 200
    return {r["id"]: r for r in doc}


def ms(ns: int) -> float:
    return ns / 1e6


def body(tokens: int) -> dict:
    return {"model": "llama2-13b", "prompt": "load me", "max_tokens": tokens, "stream": True, "ignore_eos": True}


def start(launch, weights, tmp_path, **knobs):  # noqa: F811 (fixtures passed in)
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0])), **{f"STANDIN_{k.upper()}": str(v) for k, v in knobs.items()}}
    return launch(MIXED, vllm_args(weights, port, 1), env, port), Metrics(port, "llama2-13b")


def test_capacity_runs_n_at_once_queues_the_next_and_metrics_show_it(launch, weights, tmp_path):  # noqa: F811
    # the four run for about 3 s: long enough to see every state through /metrics on a busy machine
    ttft, tpot, tokens, fifth_tokens = 40, 100, 15, 3
    server, metrics = start(launch, weights, tmp_path, capacity=4, ttft_ms=ttft, tpot_ms=tpot)
    status, content_type, _ = metrics.raw()
    assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
    idle = metrics.read()
    assert idle == {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0,
                    "vllm:num_preemptions_total": 0, "vllm:prompt_tokens_total": 0,
                    "vllm:generation_tokens_total": 0, "vllm:request_success_total:stop": 0,
                    "vllm:request_success_total:length": 0, "vllm:request_success_total:abort": 0,
                    "vllm:request_success_total:error": 0, "vllm:request_success_total:repetition": 0,
                    "vllm:external_prefix_cache_queries_total": 0, "vllm:external_prefix_cache_hits_total": 0}

    first_four = [send_in_background(server.port, f"r{i}", body(tokens)) for i in range(4)]
    full = metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 4, "4 running")
    assert (full["vllm:num_requests_waiting"], full["vllm:kv_cache_usage_perc"], full["vllm:num_preemptions_total"]) \
        == (0, 1.0, 0)
    fifth = send_in_background(server.port, "r4", body(fifth_tokens))
    queued = metrics.wait_for(lambda m: m["vllm:num_requests_waiting"] == 1, "1 waiting")
    assert (queued["vllm:num_requests_running"], queued["vllm:kv_cache_usage_perc"]) == (4, 1.0)
    assert queued["vllm:num_preemptions_total"] == 1  # the one that had to wait for a slot
    join_all([*first_four, fifth])

    trace = records(server)
    four = [trace[f"r{i}"] for i in range(4)]
    earliest_end = min(r["end_ns"] for r in four)
    # all four ran at once: each streamed its first token before any of them had finished
    assert all(r["first_chunk_ns"] < earliest_end for r in four), four
    # never early: the k-th admitted (k = 1..4) waits TTFT x (1 + k/4), the first one at least 1.25 x TTFT
    for r in four:
        assert ms(r["first_chunk_ns"] - r["arrival_ns"]) >= ttft * 1.25 - SLACK_MS, r
    # the fifth got a slot only when one of the four had finished; then its TTFT at a full cache (4/4 running)
    last = trace["r4"]
    assert ms(last["first_chunk_ns"] - earliest_end) >= ttft * 2 - SLACK_MS
    waited_ms = ms(earliest_end - last["arrival_ns"])
    assert waited_ms > 0 and ms(last["first_chunk_ns"] - last["arrival_ns"]) >= waited_ms + ttft * 2 - SLACK_MS
    assert ms(last["end_ns"] - last["arrival_ns"]) < waited_ms + ttft * 2 + (fifth_tokens - 1) * tpot * 2 + LATE_MS

    done = metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 0, "all finished")
    assert (done["vllm:num_requests_waiting"], done["vllm:kv_cache_usage_perc"]) == (0, 0)
    assert done["vllm:num_preemptions_total"] == 1
    assert done["vllm:request_success_total:length"] == 5
    assert done["vllm:generation_tokens_total"] == 4 * tokens + fifth_tokens
    assert done["vllm:prompt_tokens_total"] == 5 * 2
    # each finished request once in vLLM's per-request histograms: the fifth alone spent time queued
    found = metrics.histograms()
    assert all(found[name][2] == 5 for name in HISTOGRAMS if name != "vllm:inter_token_latency_seconds")
    assert found["vllm:request_prompt_tokens"][1] == 5 * 2
    assert found["vllm:request_generation_tokens"][1] == 4 * tokens + fifth_tokens
    queued_s = found["vllm:request_queue_time_seconds"][1]
    assert waited_ms / 1000 - 0.005 <= queued_s <= ms(last["first_chunk_ns"] - last["arrival_ns"]) / 1000


def assert_never_early(record, start_ns: int, interval_ms) -> None:
    """Token i is written no sooner than start + the sum of the first i intervals' least length. Deadlines are
    absolute (a late token is followed by a shorter interval), so single intervals are not bounded, the sum is.
    `interval_ms(t)`: the least interval after a token written at wall-clock time t (the load is read then)."""
    chunks = record["chunk_ns"]
    due = 0.0
    for i, t in enumerate(chunks):
        if i:
            due += interval_ms(chunks[i - 1])
        assert ms(t - start_ns) >= due - SLACK_MS, (i, [ms(c - start_ns) for c in chunks])


def test_tpot_grows_with_the_running_count(launch, weights, tmp_path):  # noqa: F811
    tpot, tokens = 50, 20
    server, metrics = start(launch, weights, tmp_path, capacity=4, tpot_ms=tpot, load_slowdown=1.0)
    send_in_background(server.port, "alone", body(tokens)).join(EVENT_TIMEOUT_S)
    alone = records(server)["alone"]
    # r = 1 of 4: TPOT x 1.25 a token, never sooner; the whole answer not wildly later
    assert_never_early(alone, alone["arrival_ns"], lambda t: tpot * 1.25)
    assert ms(alone["chunk_ns"][-1] - alone["arrival_ns"]) < (tokens - 1) * tpot * 1.25 + LATE_MS

    busy_threads = [send_in_background(server.port, f"busy{i}", body(tokens)) for i in range(4)]
    metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 4, "4 running")
    join_all(busy_threads)
    busy = [records(server)[f"busy{i}"] for i in range(4)]
    all_running = max(r["first_chunk_ns"] for r in busy)  # from here on all four hold a slot...
    one_done = min(r["end_ns"] for r in busy)  # ...until the first of them finishes
    assert sum(all_running <= t < one_done for r in busy for t in r["chunk_ns"][:-1]) > 0, \
        "no token was written while all four ran"
    for r in busy:
        # r = 4 of 4 while all run: TPOT x (1 + 1.0 x 4/4) = 2 x TPOT, 1.6 x the r = 1 interval; else r >= 1
        assert_never_early(r, r["arrival_ns"], lambda t: tpot * (2 if all_running <= t < one_done else 1.25))
        assert ms(r["end_ns"] - r["arrival_ns"]) < (tokens - 1) * tpot * 2 + LATE_MS
    assert metrics.read()["vllm:num_preemptions_total"] == 0  # never more than 4 at once


def test_load_slowdown_zero_keeps_the_latency_flat(launch, weights, tmp_path):  # noqa: F811
    tpot, tokens = 30, 40
    server, metrics = start(launch, weights, tmp_path, capacity=2, tpot_ms=tpot, load_slowdown=0)
    threads = [send_in_background(server.port, f"flat{i}", body(tokens)) for i in range(2)]
    metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 2, "2 running")
    threads.append(send_in_background(server.port, "flat2", body(tokens)))
    metrics.wait_for(lambda m: m["vllm:num_preemptions_total"] == 1, "a preemption")
    join_all(threads)
    trace = records(server)
    first_end = min(trace[f"flat{i}"]["end_ns"] for i in range(2))
    # the third started only after one of the first two had ended; slowdown 0: TPOT whatever the load
    assert trace["flat2"]["first_chunk_ns"] > first_end
    for rid, start_ns in (("flat0", trace["flat0"]["arrival_ns"]), ("flat1", trace["flat1"]["arrival_ns"]),
                          ("flat2", first_end)):
        assert_never_early(trace[rid], start_ns, lambda t: tpot)
        assert ms(trace[rid]["end_ns"] - start_ns) < (tokens - 1) * tpot + LATE_MS


def test_without_capacity_nothing_waits_or_slows_down(launch, weights, tmp_path):  # noqa: F811
    tpot, tokens = 50, 30
    server, metrics = start(launch, weights, tmp_path, tpot_ms=tpot)
    threads = [send_in_background(server.port, f"free{i}", body(tokens)) for i in range(6)]
    running = metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 6, "6 running")
    # no capacity: the usage is the running share of --max-num-seqs (256 in vllm_args)
    assert running["vllm:num_requests_waiting"] == 0 and running["vllm:kv_cache_usage_perc"] == 6 / 256
    join_all(threads)
    for r in records(server).values():
        # token i at arrival + i x TPOT as before: never early, the whole answer not much later
        offsets = [ms(t - r["arrival_ns"]) for t in r["chunk_ns"]]
        assert all(off >= i * tpot - SLACK_MS for i, off in enumerate(offsets)), offsets
        assert offsets[-1] < (tokens - 1) * tpot + LATE_MS
    done = metrics.read()
    assert (done["vllm:num_preemptions_total"], done["vllm:request_success_total:length"]) == (0, 6)


def hold_a_slot(port: int, rid: str) -> socket.socket:
    """A streamed request far longer than the test (4000 tokens: minutes) that takes the only slot until the test
    closes its socket (the stand-in's next write fails and it gives the slot back): a hold the test ends, not a
    race with time."""
    payload = json.dumps(body(4000)).encode()  # within --max-model-len 4096
    sock = socket.create_connection(("127.0.0.1", port), timeout=EVENT_TIMEOUT_S)
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"X-Request-Id: {rid}\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def test_non_streamed_answers_wait_for_their_slot_too(launch, weights, tmp_path):  # noqa: F811
    tpot, tokens = 30, 20
    server, metrics = start(launch, weights, tmp_path, capacity=1, tpot_ms=tpot)
    whole = {**body(tokens), "stream": False}
    holder = hold_a_slot(server.port, "hold")
    try:
        metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 1, "1 running")
        # both non-streamed requests queue behind the hold, in order: neither can get in before the test lets go
        threads = [send_in_background(server.port, "whole0", whole)]
        metrics.wait_for(lambda m: m["vllm:num_requests_waiting"] == 1, "1 waiting")
        threads.append(send_in_background(server.port, "whole1", whole))
        metrics.wait_for(lambda m: m["vllm:num_requests_waiting"] == 2, "2 waiting")
    finally:
        holder.close()
    join_all(threads)
    trace = records(server)
    assert trace["hold"]["aborted"] and trace["hold"]["status"] == 499
    # capacity 1: whole0 started when the hold gave its slot back and whole1 only after whole0 ended (a
    # non-streamed answer holds its slot too), each taking its intervals at TPOT x (1 + 1/1)
    answer_ms = (tokens - 1) * tpot * 2
    assert ms(trace["whole0"]["end_ns"] - trace["hold"]["end_ns"]) >= answer_ms - SLACK_MS
    assert ms(trace["whole1"]["end_ns"] - trace["whole0"]["end_ns"]) >= answer_ms - SLACK_MS
    done = metrics.read()
    assert (done["vllm:num_preemptions_total"], done["vllm:request_success_total:abort"],
            done["vllm:request_success_total:length"]) == (2, 1, 2)


@pytest.mark.parametrize("value", ["0", "-1", "four"])
def test_bad_capacity_is_refused(launch, weights, tmp_path, value):  # noqa: F811
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0])), "STANDIN_CAPACITY": value}
    server = launch(MIXED, vllm_args(weights, port, 1), env, port, wait=False)
    assert server.proc.wait(timeout=EVENT_TIMEOUT_S) == 1
    assert "standin: refusing to start: STANDIN_CAPACITY=" in server.output()


def test_latency_histograms_count_each_finished_request_in_vllms_buckets(launch, weights, tmp_path):  # noqa: F811
    """TTFT, inter-token latency and e2e as vLLM 0.33's histograms (names and default buckets of
    vllm/v1/metrics/loggers.py and buckets.py): one TTFT and one e2e per request, one ITL per gap between tokens,
    each in the bucket its value falls in (cumulative, ending at +Inf = _count)."""
    server, metrics = start(launch, weights, tmp_path, ttft_ms=30, tpot_ms=12)
    empty = metrics.histograms()
    assert all(count == 0 for _, _, count in empty.values())
    assert "+Inf" in [le for le, _ in empty["vllm:time_to_first_token_seconds"][0]]
    join_all([send_in_background(server.port, f"h{i}", body(5)) for i in range(3)])
    found = metrics.histograms()
    ttft, itl, e2e, queue, inference, prefill, decode, prompt, generated = (found[name] for name in HISTOGRAMS)
    assert (ttft[2], itl[2], e2e[2]) == (3, 3 * 4, 3)
    for buckets, _, count in (ttft, itl, e2e):
        cumulative = [value for _, value in sorted(buckets, key=lambda b: float(b[0]))]  # float("+Inf") sorts last
        assert cumulative == sorted(cumulative) and cumulative[-1] == count
    # 30 ms to the first token (its deadline): in (0.02, 0.04]; 12 ms (never less) between tokens: in (0.01, 0.025]
    assert dict(ttft[0])["0.02"] == 0 and dict(ttft[0])["0.04"] == 3
    assert dict(itl[0])["0.01"] == 0 and dict(itl[0])["0.025"] == 12
    assert e2e[1] >= 3 * (0.030 + 4 * 0.012) and dict(e2e[0])["0.3"] == 3
    # the phases (vllm/v1/metrics/stats.py:593-605): no queue without a capacity, prefill to the first token,
    # decode the four gaps after it; the lengths in the 1-2-5 token buckets (prompt "load me": 2 words)
    assert (queue[1], queue[2], inference[2], prefill[2], decode[2]) == (0, 3, 3, 3, 3)
    # sums of differences of monotonic stamps: each may come out a rounding step (~1e-12 s) under its sleep
    assert prefill[1] >= 3 * 0.030 - 1e-9 and decode[1] >= 3 * 4 * 0.012 - 1e-9
    assert inference[1] >= prefill[1] + decode[1] - 1e-9
    assert [dict(prompt[0])[le] for le in ("1.0", "2.0")] == [0, 3] and prompt[1] == 6
    assert [dict(generated[0])[le] for le in ("2.0", "5.0")] == [0, 3] and generated[1] == 15


def test_requests_to_a_hung_engine_wait_while_no_token_comes(launch, weights, tmp_path):  # noqa: F811
    """STANDIN_HANG_AFTER_REQUESTS: the engine hangs (standin/stall.py); every further request is accepted and
    shows as waiting while the generated-token counter stands still — vLLM's gauges with a stuck engine, what
    `deployctl monitor`'s hang alert looks for."""
    server, metrics = start(launch, weights, tmp_path, capacity=1, hang_after_requests=1)
    join_all([send_in_background(server.port, "ok", body(3))])
    assert metrics.read()["vllm:generation_tokens_total"] == 3
    hung = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=EVENT_TIMEOUT_S)
            payload = json.dumps(body(3)).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
            hung.append(sock)
        held = metrics.wait_for(lambda v: v["vllm:num_requests_running"] == 0 and v["vllm:num_requests_waiting"] == 2,
                                "both requests waiting on the hung engine")
        assert held["vllm:generation_tokens_total"] == 3
    finally:
        for sock in hung:
            sock.close()


def test_generated_tokens_count_as_they_come_even_when_not_streamed(launch, weights, tmp_path):  # noqa: F811
    """vLLM counts generation tokens every engine step, streamed or not: the counter moves during a long
    non-streamed answer (else a busy server looks hung to `deployctl monitor`'s hang alert)."""
    server, metrics = start(launch, weights, tmp_path, tpot_ms=100)
    thread = send_in_background(server.port, "whole", {**body(20), "stream": False})
    partial = metrics.wait_for(lambda v: 0 < v["vllm:generation_tokens_total"] < 20,
                               "tokens counted before the answer is complete")
    assert partial["vllm:num_requests_running"] == 1
    join_all([thread])
    assert metrics.read()["vllm:generation_tokens_total"] == 20


def test_max_num_seqs_caps_the_batch_below_the_capacity_without_preemptions(launch, weights, tmp_path):  # noqa: F811
    # vLLM's scheduler runs at most max_num_seqs sequences (scheduler.py, max_num_running_reqs); the cache has room
    # for 8, so the third request only queues: waiting, the cache a quarter full, no preemption
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0])), "STANDIN_CAPACITY": "8", "STANDIN_TPOT_MS": "100"}
    args = vllm_args(weights, port, 1)
    args[args.index("--max-num-seqs") + 1] = "2"
    server, metrics = launch(MIXED, args, env, port), Metrics(port, "llama2-13b")
    threads = [send_in_background(server.port, f"seq{i}", body(15)) for i in range(2)]
    metrics.wait_for(lambda m: m["vllm:num_requests_running"] == 2, "2 running")
    threads.append(send_in_background(server.port, "seq2", body(15)))
    queued = metrics.wait_for(lambda m: m["vllm:num_requests_waiting"] == 1, "1 waiting")
    assert (queued["vllm:num_requests_running"], queued["vllm:kv_cache_usage_perc"]) == (2, 0.25)
    join_all(threads)
    trace = records(server)
    assert trace["seq2"]["first_chunk_ns"] > min(trace[f"seq{i}"]["end_ns"] for i in range(2))
    assert metrics.read()["vllm:num_preemptions_total"] == 0
