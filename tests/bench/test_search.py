"""The saturation search's decisions with plain data: a server that meets the SLOs up to a capacity."""

from __future__ import annotations

import json

import pytest

from deployctl.bench.search import Probe, SearchPlan, decide


def search(plan, capacity, offered=lambda load: load):
    probes = []
    while True:
        verdict = decide(plan, probes)
        if verdict.next_load is None:
            return verdict, [p.load for p in probes]
        load = verdict.next_load
        probes.append(Probe(load, load <= capacity, offered(load) if plan.by == "rate" else None))


@pytest.mark.parametrize("capacity", [1, 3, 8, 9, 17, 100, 1000])
def test_concurrency_finds_the_capacity_within_ten_percent_within_the_run_budget(capacity):
    verdict, loads = search(SearchPlan("concurrency", 1), capacity)
    assert verdict.max_meeting <= capacity < verdict.first_missing <= max(verdict.max_meeting * 1.1,
                                                                           verdict.max_meeting + 1), loads
    assert len(loads) <= 12 and verdict.stopped.startswith("bracketed")
    if capacity < 10:  # small ones exactly
        assert verdict.max_meeting == capacity


def test_concurrency_from_one_to_eight():
    verdict, loads = search(SearchPlan("concurrency", 1), 8)
    assert loads == [1, 4, 16, 8, 11, 9]  # 9 misses: 8 it is


@pytest.mark.parametrize("capacity", [0.7, 5.0, 27.3, 480.0, 3100.0])
def test_rate_brackets_the_capacity_within_ten_percent_in_twelve_runs(capacity):
    verdict, loads = search(SearchPlan("rate", 1.0), capacity)
    assert verdict.max_meeting <= capacity < verdict.first_missing <= verdict.max_meeting * 1.1, loads
    assert len(loads) <= 12


def test_a_start_above_capacity_comes_down_and_a_start_that_never_meets_stops():
    verdict, loads = search(SearchPlan("rate", 64.0), 10.0)
    assert loads[:3] == [64.0, 16.0, 4.0] and verdict.max_meeting <= 10.0 < verdict.first_missing
    verdict, loads = search(SearchPlan("concurrency", 4), 0)
    assert loads == [4, 1] and verdict.max_meeting is None and "already misses" in verdict.stopped


def test_the_client_falling_short_of_the_asked_rate_stops_the_search_saying_so():
    verdict, loads = search(SearchPlan("rate", 100.0), 1e9, offered=lambda load: min(load, 1500.0))
    assert loads == [100.0, 400.0, 1600.0, 6400.0]  # 1500 of 1600 is within 10 %: that run counts
    assert verdict.max_meeting == 1600.0 and "the client offered only 1500.0 req/s of 6400" in verdict.stopped
    verdict, loads = search(SearchPlan("rate", 100.0), 1e9, offered=lambda load: min(load, 1200.0))
    assert loads == [100.0, 400.0, 1600.0]
    assert verdict.max_meeting == 400.0 and "the client offered only 1200.0 req/s of 1600" in verdict.stopped


def test_a_budget_of_runs_ends_the_search_with_the_best_so_far():
    verdict, loads = search(SearchPlan("rate", 1.0, max_runs=5), 1e6)
    assert len(loads) == 5 and verdict.max_meeting == 256.0 and "run budget" in verdict.stopped


def test_search_end_to_end_stops_where_the_lowest_load_misses_or_the_budget_ends(standin, capsys, monkeypatch,
                                                                                 tmp_path):
    from deployctl.bench import search as search_module
    from tests.bench.test_cli import bench

    server = standin(ttft_ms=5, tpot_ms=2)
    results = tmp_path / "results"
    code, doc, err = bench(capsys, "search", server.url, "--by", "concurrency", "--slo", "e2el_p99=1ms",
                           "--prompt-tokens", "8", "--output-tokens", "4", "--epochs", "1",
                           "--result-dir", str(results))
    assert code == 0, err
    assert [r["parallel_num"] for r in doc["runs"]] == [1]  # never early: 5 ms + 3 x 2 ms > 1 ms
    assert doc["search"]["max_meeting"] is None and "already misses" in doc["search"]["stopped"]
    # the files are named after the command (--result-dir's help), not after the kind of run it made
    assert sorted(p.name for p in results.iterdir()) == ["bench_search.csv", "bench_search.json", "bench_search.png"]
    assert json.loads((results / "bench_search.json").read_text()) == doc
    # This part is about the climb and the run budget. Whether this machine can offer 320 req/s depends on its
    # load, and a client that falls short rightly stops a search (test_the_client_falling_short_of_the_asked_
    # rate_stops_the_search_saying_so): here the test says the client kept up, so the answer does not hang on
    # how busy the machine is.
    monkeypatch.setattr(search_module, "CLIENT_SHORTFALL", 0.0)
    code, doc, err = bench(capsys, "search", server.url, "--by", "rate", "--slo", "e2el_p99=60s", "--max-runs", "3",
                           "--start", "20", "--run-seconds", "0.5", "--prompt-tokens", "8", "--output-tokens", "2")
    assert code == 0, err
    assert [(r["request_rate"], r["requests"]) for r in doc["runs"]] == [(20.0, 20), (80.0, 40), (320.0, 160)]
    assert doc["search"] == {"by": "rate", "limits_ms": {"e2el_p99": 60000.0}, "max_meeting": 320.0,
                             "first_missing": None, "stopped": "run budget spent (3 runs)", "runs": 3}
    assert all(r["slo"]["met"] and 0 < r["offered_rate"] <= r["request_rate"] for r in doc["runs"])
    assert "search: run budget spent (3 runs); the highest rate that meets the SLOs: 320" in err
