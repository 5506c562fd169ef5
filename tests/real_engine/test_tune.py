"""`deployctl tune` on the real vLLM engine (its CPU build, in its image on tb1 made a GPU host): four candidates of
one mixed instance (max_num_seqs 1, 2, 4, 8) each deployed and measured by bench search against vLLM itself, then
ranked, the winner deployed and its spec written, the plot drawn; a second run with the same inputs reuses every
record and deploys nothing. One test: each start of the engine costs about a minute on 2 cores.

Its own marker, `real_engine_tune`, beside `real_engine`: `-m real_engine` leaves it out (tests/conftest.py) and
.ci/run runs it as a stage of its own (`-m real_engine_tune`)."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.e2e.conftest import container_ids
from tests.real_engine.conftest import HOST, real_spec
from tests.testbed import real_engine

pytestmark = [pytest.mark.real_engine, pytest.mark.real_engine_tune]

NAME = "re-tune"
PORT = 8620
SERVER = f"{NAME}-mixed-0"
SEQS = (1, 2, 4, 8)
# --grid: every one of the four is measured whatever the engine's timings on a shared machine say (the search's own
# moves, which follow those timings, are tests/e2e/test_tune.py's, on the stand-in). One layout (tp1 x dp1: one
# engine on 2 cores), one max_num_batched_tokens. Short bench searches: concurrency 1, 4, 16 at most, one wave of
# 16-token prompts and 64-token answers each (~5 ms a token here: a wave lasts long enough for the 0.5 s telemetry to
# see requests running); a TTFT p99 of 1 s, which one request alone meets on any load of this machine.
TUNE = ("--search", "max_num_seqs=" + ",".join(map(str, SEQS)), "--search", "tp=1", "--search", "dp=1",
        "--search", "max_num_batched_tokens=512", "--grid", "--slo", "ttft_p99=1000ms", "--by", "concurrency",
        "--start", "1", "--max-runs", "3", "--epochs", "1", "--prompt-tokens", "16", "--output-tokens", "64",
        "--telemetry-interval", "0.5", "--yes")
SVG = "{http://www.w3.org/2000/svg}"


def label(seqs: int) -> str:
    return f"tp1-dp1-seqs{seqs}-bt512"


def max_num_seqs_running(bed) -> int:
    """The running server's --max-num-seqs, from its container's argv."""
    args = json.loads(bed.docker_on(HOST, "inspect", "--format", "{{json .Args}}", SERVER).stdout)
    return int(args[args.index("--max-num-seqs") + 1])


def completion(bed) -> dict:
    body = json.dumps({"model": "tiny", "prompt": "Say hello", "max_tokens": 4, "temperature": 0})
    out = bed.run_on(HOST, ["curl", "--silent", "--max-time", "60", "-H", "Content-Type: application/json",
                            "-d", body, f"http://127.0.0.1:{PORT}/v1/completions"]).stdout
    return json.loads(out)


def test_tune_measures_four_candidates_on_the_real_engine_deploys_the_best_and_reuses_results(
        real_bed, deployctl, capsys):
    bed = real_bed
    path = deployctl.write(real_spec(bed, NAME, (PORT,), max_num_seqs=8), name=f"{NAME}.yaml")
    results = path.parent / ".deployctl" / NAME / "tune"
    try:
        began = time.monotonic()
        code, out, err = deployctl("tune", path, *TUNE, "--output", "json")
        wall = time.monotonic() - began
        assert code == 0, err
        doc = json.loads(out)
        records = doc["candidates"]
        assert sorted(r["label"] for r in records) == sorted(label(s) for s in SEQS), records
        assert all(r["status"] == "measured" and not r.get("reused") for r in records), records
        assert (doc["measured"], doc["reused"], doc["interrupted"]) == (4, 0, False)
        assert doc["stopped"] == "the full grid was tried"
        assert any(r["goodput_rps"] > 0 for r in records), records
        assert doc["cards"]["per_host"] == {HOST: 2}  # the spec's requirements.cards

        # Each candidate was measured against vLLM itself, with its own max_num_seqs: the bench ran on the real
        # engine's image, read vLLM's own /metrics over SSH (its KV cache gauge, vllm:kv_cache_usage_perc), and
        # vLLM's scheduler never ran more sequences at once than the candidate allows.
        busiest = {}
        for record in records:
            seqs = record["values"]["model.max_num_seqs"]
            bench = json.loads(Path(record["bench_file"]).read_text())
            assert bench["image"] == real_engine.IMAGE and bench["runs"], bench
            engines = [e for run in bench["runs"] for e in (run.get("telemetry") or {}).get("engines", {}).values()]
            assert engines and all(e["kv_cache_usage_max"] is not None for e in engines), (record["label"], engines)
            running = [e["running_max"] for e in engines if e["running_max"] is not None]
            assert running and max(running) <= seqs, (record["label"], running)
            assert record["time_to_serve_s"] > 0 and record["bench_s"] > 0, record
            busiest[record["label"]] = max(running)
        assert max(busiest.values()) >= 1, busiest  # the gauges were read while requests ran, not only idle
        # the ranking: measured, meeting the SLO, then goodput per card (one card each: goodput)
        meeting = [r for r in records if r["meets_slo"]]
        assert meeting and records[:len(meeting)] == meeting, records
        assert [r["goodput_per_card"] for r in meeting] == sorted((r["goodput_per_card"] for r in meeting),
                                                                  reverse=True), records

        # the winner serves, as vLLM (its fingerprint, its engine core process), and its spec is written
        winner = records[0]
        wanted = winner["values"]["model.max_num_seqs"]
        assert doc["winner"] == doc["deployed"] == winner["label"]
        assert max_num_seqs_running(bed) == wanted
        answer = completion(bed)
        assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", answer["system_fingerprint"]), answer
        comms = bed.docker_on(HOST, "exec", SERVER, "sh", "-c", "cat /proc/[0-9]*/comm").stdout
        assert "VLLM::EngineCor" in comms.split("\n"), comms
        tuned = path.with_name(f"{NAME}.tuned.yaml")
        assert doc["tuned_spec"] == str(tuned) and f"max_num_seqs: {wanted}" in tuned.read_text()

        # the plot: an SVG with one point per candidate, named, the winner ringed
        assert doc["plot"] == str(results / "tune.svg")
        svg = ElementTree.parse(doc["plot"]).getroot()
        assert svg.tag == f"{SVG}svg"
        titles = [t.text for t in svg.iter(f"{SVG}title")]
        assert sorted(t.split(":")[0] for t in titles) == sorted(label(s) for s in SEQS), titles
        assert len(list(svg.iter(f"{SVG}circle"))) == len(SEQS) + 1
        assert len(list(results.glob("tp1-dp1-seqs*.bench.json"))) == len(SEQS)

        # the same inputs again: every record reused, nothing deployed (the winner's containers kept)
        before = container_ids(bed, HOST, NAME)
        began = time.monotonic()
        code, out, err = deployctl("tune", path, *TUNE, "--output", "json")
        rerun = time.monotonic() - began
        assert code == 0, err
        again = json.loads(out)
        assert (again["measured"], again["reused"], again["winner"]) == (0, 4, doc["winner"]), again
        assert all(r.get("reused") for r in again["candidates"]), again["candidates"]
        assert err.count("measured before") == len(SEQS), err
        assert container_ids(bed, HOST, NAME) == before
        assert max_num_seqs_running(bed) == wanted

        # a figure for the record, not an assertion: what the tune spent beyond its deploys and benches
        deploys, benches = (sum(r[key] for r in records) for key in ("time_to_serve_s", "bench_s"))
        overhead = wall - deploys - benches - doc["end_deploy_s"]
        with capsys.disabled():
            print(f"\ntune on the real engine: {wall:.1f} s for {len(records)} candidates (deploys {deploys:.1f} s, "
                  f"benches {benches:.1f} s, final deploy {doc['end_deploy_s']:.1f} s); overhead {overhead:.2f} s, "
                  f"{overhead / len(records):.2f} s a candidate, {100 * overhead / (deploys + benches):.2f} % of "
                  f"deploy + bench; the second run, every record reused: {rerun:.1f} s")
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}
