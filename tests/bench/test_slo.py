"""SLOs and goodput: parsing `--slo`, which requests count, the run's verdict, the CSV and table, and the figures
end to end against a stand-in, checked against its own trace of every request."""

from __future__ import annotations

import csv
import json

import pytest

from deployctl.bench.metrics import RequestRecord, summarize_run
from deployctl.bench.report import csv_text, table_rows
from deployctl.bench.slo import Slo, SloError, meets, parse_slos, slo_result
from tests.bench.test_cli import bench

MS = 1_000_000


def record(rid, ttft, gaps, ok=True, tokens=None):
    """A streamed request sent at 0: first chunk at `ttft` ms, then one chunk per gap (ms)."""
    chunks = [ttft * MS]
    for gap in gaps:
        chunks.append(chunks[-1] + gap * MS)
    return RequestRecord(rid, ok, 0, chunks[-1], tuple(chunks), status=200 if ok else 500,
                         output_tokens=tokens if tokens is not None else len(chunks), prompt_tokens=10)


def test_slos_parse_as_users_write_them_and_every_mistake_is_named():
    assert parse_slos("ttft_p99=2000ms, tpot_p99=50ms,e2el_p90=1.5s") == (
        Slo("ttft", "p99", 2000.0), Slo("tpot", "p99", 50.0), Slo("e2el", "p90", 1500.0))
    for text, said in (("ttft=2000ms", r"expected METRIC_STAT=VALUE\(ms\|s\)"), ("ttfb_p99=1ms", "unknown metric 'ttfb'"),
                       ("ttft_p42=1ms", "unknown statistic 'p42'"), ("ttft_p99=2000", "expected"),
                       ("ttft_p99=0ms", "above 0"), ("ttft_p99=1ms,ttft_p99=2ms", "ttft_p99 given twice"),
                       (",", "no SLO given")):
        with pytest.raises(SloError, match=said):
            parse_slos(text)


def test_a_request_counts_toward_goodput_only_when_it_meets_every_limit_itself():
    slos = parse_slos("ttft_p99=100ms,tpot_p99=20ms,itl_p99=30ms")
    assert meets(record("a", 50, [10, 10]), slos)
    assert not meets(record("b", 150, [10, 10]), slos)  # TTFT
    assert not meets(record("c", 50, [25, 25]), slos)  # TPOT 25
    assert not meets(record("d", 50, [5, 35, 5]), slos)  # TPOT 15, but one gap of 35 ms
    assert not meets(record("e", 50, [10], ok=False), slos)
    assert meets(record("f", 50, [], tokens=1), slos)  # one token: no TPOT, no ITL to miss


def test_the_run_verdict_names_each_missed_statistic_and_goodput_is_per_second_of_the_run():
    records = [record(f"r{i}", 10, [10] * 3) for i in range(8)] + [record("slow1", 400, [10] * 3),
                                                                    record("slow2", 500, [10] * 3)]
    summary = summarize_run(records, parallel_num=10)
    result = slo_result(records, parse_slos("ttft_p50=100ms,ttft_p99=100ms,e2el_p99=2s"), summary)
    assert result["met"] is False and [v["slo"] for v in result["violations"]] == ["ttft_p99"]
    assert result["violations"][0]["observed_ms"] == summary["ttft_ms"]["p99"] > 100
    assert (result["good_requests"], result["goodput_share"]) == (8, 0.8)
    assert result["goodput_request_throughput"] == pytest.approx(8 / summary["duration_s"])
    assert result["goodput_output_token_throughput"] == pytest.approx(8 * 4 / summary["duration_s"])
    document = {"mode": "static", "runs": [{**summary, "prompt_tokens": 10, "output_tokens": 4, "slo": result}]}
    row = next(csv.DictReader(csv_text(document).splitlines()))
    assert (row["slo_met"], row["good_requests"], row["goodput_share"]) == ("False", "8", "0.8")
    assert json.loads(row["slo_violations"])[0]["slo"] == "ttft_p99"
    header, rows = table_rows(document)
    assert header[-3:] == ["SLO", "goodput req/s", "good %"] and rows[0][-3] == "missed ttft_p99"
    assert rows[0][-1] == "80.0"


def test_goodput_against_a_standin_agrees_with_its_own_trace(standin, capsys, tmp_path):
    # two kinds of request in one run, far apart: 2 tokens (about 20 ms) and 40 tokens (about 400 ms)
    dataset = tmp_path / "custom.json"
    dataset.write_text(json.dumps([{"prompt": "short one", "output_tokens": 2},
                                   {"prompt": "a long one", "output_tokens": 40}]))
    server = standin(ttft_ms=5, tpot_ms=10)
    code, doc, err = bench(capsys, "dynamic", server.url, "--request-rate", "40", "--num-prompts", "20",
                           "--dataset", str(dataset), "--dataset-type", "custom", "--slo", "e2el_p50=200ms")
    assert code == 0, err
    (run,) = doc["runs"]
    trace = server.trace().values()
    # the server's own view: a request met the limit when its answer ended within 200 ms of its arrival
    good_by_trace = sum(1 for t in trace if (t["end_ns"] - t["arrival_ns"]) / MS <= 200)
    assert 0 < good_by_trace < len(trace) == 20
    slo = run["slo"]
    assert slo["good_requests"] == good_by_trace == sum(1 for t in trace if t["completion_tokens"] == 2)
    assert slo["goodput_share"] == good_by_trace / 20
    assert slo["goodput_output_token_throughput"] == pytest.approx(2 * good_by_trace / run["duration_s"])
    assert slo["met"] is (run["e2el_ms"]["p50"] <= 200)


def test_a_bad_slo_is_exit_2_before_any_request(capsys):
    code, doc, err = bench(capsys, "static", "http://127.0.0.1:9", "--served-model-name", "m", "--slo", "ttft=1s")
    assert code == 2 and "expected METRIC_STAT=VALUE" in err
