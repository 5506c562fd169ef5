"""`tune --traffic`: a dataset's prompts, synthetic lengths or a rate to serve, checked before anything is deployed;
each candidate's bench search sends that traffic (a local stand-in here); with a rate, a candidate meets the SLOs
only at that rate or above and the fewest cards that do win."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest

from deployctl.errors import UsageError
from deployctl.tune.result import measured, rank
from deployctl.tune.traffic import Traffic, parse_traffic
from tests.bench.conftest import standin  # noqa: F401 - the fixture: stand-in servers on 127.0.0.1
from tests.tune.test_tune_core import SPEC, bench


def test_traffic_reads_lengths_datasets_and_a_rate_and_defaults_to_bench_searchs_lengths():
    assert parse_traffic([], None, None, "rate") == Traffic(1024, 128)
    assert parse_traffic([], 64, None, "concurrency") == Traffic(64, 128)
    assert parse_traffic(["lengths=512/64"], None, None, "concurrency") == Traffic(512, 64)
    assert parse_traffic(["dataset=sg.json,rate=2.5"], None, 32, "rate") == Traffic(None, 32, "sg.json", rate=2.5)
    assert parse_traffic(["dataset=a.json", "dataset_type=alpaca"], None, None, "rate") == Traffic(
        None, None, "a.json", "alpaca")
    # what makes a record reusable: nothing more when only the lengths are given (they are kept on their own)
    assert Traffic(1024, 128).settings(None) == {}
    assert Traffic(None, None, "a.json", "alpaca", 2.0).settings("abc") == {
        "dataset_sha256": "abc", "dataset_type": "alpaca", "rate": 2.0}


@pytest.mark.parametrize("words, prompt, by, said", [
    (["length=1/2"], None, "rate", "--traffic 'length=1/2': expected"),
    (["rate="], None, "rate", "--traffic 'rate=': expected"),
    (["rate=1", "rate=2"], None, "rate", "--traffic rate given twice"),
    (["rate=0"], None, "rate", "--traffic rate=0: requests per second"),
    (["rate=fast"], None, "rate", "--traffic rate=fast: requests per second"),
    (["lengths=1024"], None, "rate", "--traffic lengths=1024: PROMPT/OUTPUT"),
    (["lengths=0/8"], None, "rate", "--traffic lengths=0/8"),
    (["lengths=8/8"], 16, "rate", "say the same: give one"),
    (["dataset_type=alpaca"], None, "rate", "dataset_type needs dataset=FILE"),
    (["dataset=x.json", "dataset_type=csv"], None, "rate", "one of sharegpt, alpaca, custom"),
    (["dataset=x.json"], 16, "rate", "it does not go with a prompt length"),
    (["dataset=x.json"], None, "concurrency", "--traffic dataset needs --by rate"),
    (["rate=4"], None, "concurrency", "--traffic rate needs --by rate"),
])
def test_bad_traffic_is_a_usage_error_naming_it(words, prompt, by, said):
    with pytest.raises(UsageError, match=said.replace("(", r"\(").replace("?", r"\?")):
        parse_traffic(words, prompt, None, by)


def test_tune_refuses_bad_traffic_at_the_cli_edge_before_anything_is_written(tmp_path, capsys):
    from deployctl.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("${TUNE_SECRET}", "x"))
    for flags, said in ((["--traffic", "rate=4", "--by", "concurrency"], "--traffic rate needs --by rate"),
                        (["--traffic", f"dataset={tmp_path / 'none.json'}"], "none.json"),
                        (["--traffic", "lengths=8/8", "--prompt-tokens", "8"], "say the same")):
        assert main(["tune", str(spec), "--slo", "ttft_p99=1s", *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
    assert not (tmp_path / ".deployctl").exists()  # nothing written, nothing deployed


def test_with_a_rate_to_serve_a_candidate_meets_only_at_that_rate_and_the_fewest_cards_win():
    def record(label, cards, max_load, goodput, rate=3.0):
        document = bench(max_load, max_load * 2, goodput=goodput)
        document.update(mode="dynamic", runs=[{**r, "request_rate": r.pop("parallel_num")} for r in document["runs"]])
        return measured({}, label, cards, "r", document, 1.0, rate=rate)

    short = record("short", 1, 2.0, 2.0)  # the most per card, but 2 req/s of the 3 asked
    small, big = record("small", 2, 4.0, 4.0), record("big", 4, 16.0, 16.0)  # big: more per card, more cards
    assert not short["meets_slo"] and small["meets_slo"] and big["meets_slo"] and small["rate"] == 3.0
    assert [r["label"] for r in rank([short, big, small])] == ["small", "big", "short"]
    # without a rate, goodput per card first, as before
    plain = [record("small", 2, 4.0, 4.0, None), record("big", 4, 16.0, 16.0, None)]
    assert [r["label"] for r in rank(plain)] == ["big", "small"]


def test_each_candidates_bench_sends_a_datasets_prompts_from_the_rate_to_serve(standin, tmp_path):  # noqa: F811
    from deployctl.bench.runner import run_search
    from deployctl.commands.bench import parse_slo_flag
    from deployctl.commands.tune import _load, search_inputs

    server = standin(ttft_ms=1, tpot_ms=1)
    dataset = tmp_path / "prompts.json"
    dataset.write_text(json.dumps([{"prompt": "alpha beta gamma", "output_tokens": 5},
                                   {"prompt": "one two three four five six seven", "output_tokens": 7}]))
    args = Namespace(traffic=[f"dataset={dataset},dataset_type=custom,rate=4"], prompt_tokens=None,
                     output_tokens=None, by="rate", start=None, max_runs=1, precision=0.1, epochs=1, run_seconds=1.0)
    load = _load(args, parse_slo_flag("e2el_p99=60s"))
    assert [p.text for p in load.prompts][0] == "alpha beta gamma" and len(load.dataset_sha256) == 64
    settings, plan, runs = search_inputs(args, load, [server.url], "m")
    document = run_search(settings, plan, runs, {"target": server.url})
    assert [r["request_rate"] for r in document["runs"]] == [4.0]  # the first run at the rate to serve
    sent = list(server.trace().values())
    assert len(sent) >= 20 and {r["prompt_tokens"] for r in sent} == {3, 7}, sent  # the dataset's prompts
