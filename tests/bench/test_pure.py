"""Statistics, the HTTP/SSE parser, metrics, prompts, CSV flattening and the baseline gate (no I/O)."""

from __future__ import annotations

import json
import math

import pytest

from deployctl.bench.baseline import Regression, compare
from deployctl.bench.http_parse import ProtocolError, ResponseParser
from deployctl.bench.load import poisson_offsets, request_body
from deployctl.bench.metrics import RequestRecord, summarize_run
from deployctl.bench.prompts import Prompt, parse_dataset, sample_prompts, synthetic_prompt
from deployctl.bench.report import csv_text, flatten, format_ms, table_rows
from deployctl.bench.runner import static_runs
from deployctl.bench.stats import percentile, summarize


def test_percentiles_interpolate_linearly():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([10.0], 99) == 10.0
    assert summarize([4.0, 1.0, 3.0, 2.0]) == pytest.approx(
        {"mean": 2.5, "p50": 2.5, "p90": 3.7, "p95": 3.85, "p99": 3.97})
    assert summarize([]) == {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None}


STREAM = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n"
          b"x-request-id: r1\r\n\r\n"
          b"12\r\ndata: {\"a\": \"x\"}\n\n\r\n"
          b"1d\r\ndata: {\"b\": 1}\n\ndata: [DONE]\n\n\r\n"
          b"0\r\n\r\n")


def test_parser_gives_the_same_events_whatever_the_read_boundaries():
    whole = ResponseParser()
    assert whole.feed(STREAM) == [b'{"a": "x"}', b'{"b": 1}', b"[DONE]"]
    assert whole.done and whole.status == 200 and whole.keep_alive and whole.is_stream
    assert whole.headers["x-request-id"] == "r1"
    for step in (1, 2, 3, 7):
        parser = ResponseParser()
        events = []
        for i in range(0, len(STREAM), step):
            events += parser.feed(STREAM[i:i + step])
        assert events == [b'{"a": "x"}', b'{"b": 1}', b"[DONE]"], step
        assert parser.done and parser.leftover == b""


def test_parser_error_body_with_content_length_and_connection_close():
    parser = ResponseParser()
    body = b'{"object":"error","message":"The model `x` does not exist."}'
    head = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\nconnection: close\r\n"
    assert parser.feed(head + b"content-length: %d\r\n\r\n" % len(body) + body[:10]) == []
    assert not parser.done
    assert parser.feed(body[10:]) == []
    assert parser.done and parser.status == 404 and not parser.keep_alive and bytes(parser.body) == body


def test_parser_broken_stream_and_garbage():
    parser = ResponseParser()
    parser.feed(STREAM[:60])
    with pytest.raises(ProtocolError, match="closed before the response was complete"):
        parser.eof()
    with pytest.raises(ProtocolError, match="malformed status line"):
        ResponseParser().feed(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")


def rec(rid, sent, chunks, end, out=None, ok=True, error="", prompt=10):
    return RequestRecord(rid, ok, sent, end, tuple(chunks), status=200 if ok else 500, error=error,
                         prompt_tokens=prompt, output_tokens=out if out is not None else len(chunks))


MS = 1_000_000


def test_run_metrics_follow_the_contract():
    records = [
        rec("a", 0, [10 * MS, 12 * MS, 14 * MS], 15 * MS),  # TTFT 10, E2E 15, TPOT (15-10)/2 = 2.5
        rec("b", 1 * MS, [21 * MS, 25 * MS], 26 * MS, out=3),  # 2 chunks but usage says 3 tokens: TPOT 5/2
        rec("c", 2 * MS, [], 40 * MS, ok=False, error="HTTP 500"),  # failed: no latencies, counted
    ]
    run = summarize_run(records, parallel_num=3, prompt_tokens=10, output_tokens=3)
    assert (run["parallel_num"], run["requests"], run["succeeded"], run["failed"]) == (3, 3, 2, 1)
    assert run["duration_s"] == pytest.approx(0.040)  # first sent -> last complete (the failure ended last)
    assert run["request_throughput"] == pytest.approx(2 / 0.040)
    assert run["input_token_throughput"] == pytest.approx(20 / 0.040)
    assert run["output_token_throughput"] == pytest.approx(6 / 0.040)
    assert run["total_token_throughput"] == pytest.approx(26 / 0.040)
    assert run["ttft_ms"]["mean"] == pytest.approx(15.0) and run["ttft_ms"]["p50"] == pytest.approx(15.0)
    assert run["e2el_ms"]["p50"] == pytest.approx(20.0)
    assert run["tpot_ms"]["p50"] == pytest.approx(2.5)
    assert sorted([run["itl_ms"]["p50"], run["itl_ms"]["mean"]]) == pytest.approx([2.0, 8 / 3])
    assert run["errors"] == {"HTTP 500": 1}


def test_a_first_chunk_stamped_as_sent_is_a_ttft_of_plus_zero():
    run = summarize_run([rec("a", 7 * MS, [7 * MS, 9 * MS], 9 * MS), rec("b", 8 * MS, [8 * MS, 9 * MS], 9 * MS)],
                        parallel_num=2, prompt_tokens=10, output_tokens=2)
    assert [math.copysign(1.0, run["ttft_ms"][key]) for key in ("mean", "p50", "p99")] == [1.0, 1.0, 1.0]
    assert run["ttft_ms"]["p50"] == 0.0


@pytest.mark.parametrize("value, text", [(None, "-"), (0.0, "0.0"), (-0.0, "0.0"), (-0.04, "0.0"), (0.04, "0.0"),
                                         (0.05, "0.1"), (12.34, "12.3"), (-0.06, "-0.1")])
def test_milliseconds_never_print_as_negative_zero(value, text):
    assert format_ms(value) == text


def test_bench_table_prints_a_ttft_rounding_to_zero_as_zero():
    document = doc("static", 1000.0, 30.0)
    document["runs"][0].update(ttft_ms=summary(-0.0, -0.04), request_throughput=1.0, itl_ms=summary(1.0, 1.0),
                               e2el_ms=summary(2.0, 3.0))
    header, (row,) = table_rows(document)
    assert dict(zip(header, row))["TTFT p50"] == "0.0" and dict(zip(header, row))["TTFT p99"] == "0.0"


def test_all_failed_run_has_no_latencies():
    run = summarize_run([rec("a", 5, [], 9, ok=False, error="cannot connect: refused")], request_rate=1.0)
    assert run["succeeded"] == 0 and run["failed"] == 1 and run["ttft_ms"]["p99"] is None
    assert run["output_token_throughput"] == 0.0 and run["errors"] == {"cannot connect: refused": 1}


def test_poisson_offsets_are_seeded_exponential_gaps():
    offsets = poisson_offsets(20000, 100.0, seed=3)
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert offsets == poisson_offsets(20000, 100.0, seed=3)
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.01, rel=0.03)
    assert sum(g > 0.02 for g in gaps) / len(gaps) == pytest.approx(0.1353, abs=0.01)  # P(gap > 2/rate) = e^-2
    assert poisson_offsets(3, float("inf"), 0) == [0.0, 0.0, 0.0]


def test_static_runs_pair_lengths_position_by_position():
    runs = static_runs([1, 4], [1024, 2048], [128, 256], 5)
    assert [(r.parallel_num, r.prompt_tokens, r.output_tokens, r.epochs) for r in runs] == [
        (1, 1024, 128, 5), (1, 2048, 256, 5), (4, 1024, 128, 5), (4, 2048, 256, 5)]


def test_request_bodies_ask_for_the_length_with_eos_ignored_and_usage():
    prompt = Prompt("hi there", 7)
    assert request_body("m", prompt, "completions") == {
        "model": "m", "prompt": "hi there", "max_tokens": 7, "ignore_eos": True, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}}
    chat = request_body("m", prompt, "chat")
    assert chat["messages"] == [{"role": "user", "content": "hi there"}] and "prompt" not in chat


def test_synthetic_prompts_have_the_asked_word_count_and_differ():
    a, b = synthetic_prompt(50, 8, salt=1), synthetic_prompt(50, 8, salt=2)
    assert len(a.text.split()) == 50 and a.output_tokens == 8 and a.text != b.text


def test_datasets_sharegpt_alpaca_custom():
    sharegpt = [{"conversations": [{"from": "human", "value": "why is the sky blue"},
                                   {"from": "gpt", "value": "because of Rayleigh scattering"}]},
                {"conversations": [{"from": "human", "value": "only one turn"}]}]
    assert parse_dataset(sharegpt, "sharegpt", lambda t: len(t.split())) == [
        Prompt("why is the sky blue", 4)]
    alpaca = [{"instruction": "Translate", "input": "bonjour", "output": "hello there"},
              {"instruction": "Say hi", "input": "", "output": "hi"}]
    assert parse_dataset(alpaca, "alpaca", lambda t: len(t.split())) == [
        Prompt("Translate\nbonjour", 2), Prompt("Say hi", 1)]
    custom = [{"prompt": "p1", "output_tokens": 5}, {"prompt": "bad"}]
    assert parse_dataset(custom, "custom", len) == [Prompt("p1", 5)]
    pool = [Prompt(f"p{i}", i + 1) for i in range(3)]
    picked = sample_prompts(pool, 7, seed=1, output_tokens=9)
    assert len(picked) == 7 and {p.output_tokens for p in picked} == {9}
    assert picked == sample_prompts(pool, 7, seed=1, output_tokens=9)


def summary(p50, p99):
    return {"mean": p50, "p50": p50, "p90": p99, "p95": p99, "p99": p99}


def doc(mode, throughput, ttft_p99, tpot_p50=5.0, key=8):
    run = {"parallel_num" if mode == "static" else "request_rate": key, "prompt_tokens": 128, "output_tokens": 16,
           "output_token_throughput": throughput, "ttft_ms": summary(20.0, ttft_p99), "tpot_ms": summary(tpot_p50, 6.0),
           "requests": 1, "succeeded": 1, "failed": 0}
    return {"mode": mode, "runs": [run]}


def test_baseline_gate_names_each_regression():
    base = doc("static", 1000.0, 30.0)
    assert compare(doc("static", 950.0, 32.0), base, 10) == ([], 1)
    found, matched = compare(doc("static", 800.0, 40.0, tpot_p50=5.4), base, 10)
    assert matched == 1
    assert found == [Regression("parallel_num=8 128/16", "output_token_throughput", 1000.0, 800.0, -20.0),
                     Regression("parallel_num=8 128/16", "ttft_ms.p99", 30.0, 40.0, pytest.approx(33.333, rel=1e-3))]
    assert compare(doc("static", 10.0, 99.0, key=4), base, 10) == ([], 0)  # no matching run
    assert compare(doc("dynamic", 10.0, 99.0), base, 10) == ([], 0)  # other mode


def test_csv_flattens_latency_summaries():
    document = doc("static", 1000.0, 30.0)
    document["runs"][0]["errors"] = {"HTTP 500": 2}
    row = flatten(document["runs"][0])
    assert row["ttft_ms_p99"] == 30.0 and row["tpot_ms_p50"] == 5.0 and row["errors"] == '{"HTTP 500": 2}'
    header, values = csv_text(document).splitlines()
    assert header.split(",")[:4] == ["parallel_num", "prompt_tokens", "output_tokens", "output_token_throughput"]
    import csv

    (parsed,) = list(csv.DictReader([header, values]))
    assert parsed["ttft_ms_p99"] == "30.0" and json.loads(parsed["errors"]) == {"HTTP 500": 2}


def test_a_prefix_heavy_workload_shares_the_first_words_within_each_group():
    from deployctl.bench.prompts import shared_prefix, synthetic_prompt
    from deployctl.bench.runner import BenchSettings, _synthetic

    settings = BenchSettings(bases=[], model="m", prefix_share=0.75, prefix_groups=2)
    prompts = [p.text.split() for p in _synthetic(settings, 40, 8, 6, 0)]
    assert all(len(words) == 40 for words in prompts)
    first, second = shared_prefix(40, 0.75, 0, 0), shared_prefix(40, 0.75, 1, 0)
    assert len(first) == 30 and first != second
    assert [tuple(w[:30]) for w in prompts] == [first, second] * 3  # request i: group i mod 2
    assert len({tuple(w[30:]) for w in prompts}) == 6  # the rest differs per request
    plain = synthetic_prompt(40, 8, salt=1).text.split()
    assert len(plain) == 40 and synthetic_prompt(40, 8, salt=1, prefix=first).text.split()[:30] == list(first)
