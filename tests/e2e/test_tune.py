"""`deployctl tune` on the test bed (issue 44): a stand-in whose batch is capped by --max-num-seqs (its emulated KV
cache holds 64, far above every candidate), so each max_num_seqs value serves a different concurrency within the
TTFT SLO; a first run cut by Ctrl-C during the third candidate's bench leaves the best finished candidate serving;
the next run resumes (the two finished records reused, the cut one measured again), measures 4 candidates in all,
records the one the stand-in refuses to start and goes on, counts the ones the rules prune, ranks them, leaves the
best deployed and writes its spec; a run after it with the same inputs reuses every result and deploys nothing, and
one with --retry-failed deploys the failed candidate alone again. A P/D shape (vllm-ascend's, the stand-in behind its
proxy) tunes over four per-role layouts and leaves the best per card deployed, its proxy routing to it."""

from __future__ import annotations

import json
import uuid

import yaml

from tests.children import deployctl_child
from tests.e2e.conftest import MODEL, container_ids, http_json

TESTBED_GROUP = "testbed2"  # the second bed, beside the first (tests/conftest.py)

HOST = "tb3"
TOPOLOGY = f"""topology:
  mode: mixed
  instances:
    - {{host: {HOST}, devices: [0, 1], port: 8720}}
"""
# 40 ms a token, 16 tokens: an answer takes ~650 ms; one over the batch waits a whole answer (TTFT >= 650 ms), one
# in it starts in 20 ms: a TTFT p99 of 300 ms separates them by far. No slowdown: only the batch limit differs.
ENV = ("env: {STANDIN_CAPACITY: '64', STANDIN_TTFT_MS: '20', STANDIN_TPOT_MS: '40', "
       "STANDIN_LOAD_SLOWDOWN: '0'}\n")
# max_num_batched_tokens 1024 is under max_model_len: validate refuses it, so 8 candidates are pruned unseen; the
# stand-in refuses STANDIN_CAPACITY '0' at start (images/standin/standin/config.py), as vLLM refuses a bad engine
# argument: the one candidate with it fails to start once the search tries the best's neighbours
TUNE = ("--search", "max_num_seqs=2,4,8,16", "--search", "tp=2", "--search", "dp=1",
        "--search", "max_num_batched_tokens=1024,2048", "--search", 'env.STANDIN_CAPACITY="64","0"',
        "--by", "concurrency", "--slo", "ttft_p99=300ms",
        "--prompt-tokens", "16", "--output-tokens", "16", "--epochs", "1", "--max-runs", "6",
        "--telemetry-interval", "0.2", "--skip", "weights", "--yes")


def max_num_seqs_running(bed) -> int:
    args = json.loads(bed.docker_on(HOST, "inspect", "--format", "{{json .Args}}", "e2e-tune-mixed-0").stdout)
    return int(args[args.index("--max-num-seqs") + 1])


def label(seqs: int, capacity: str = "64") -> str:
    return f"tp2-dp1-seqs{seqs}-bt2048-STANDIN_CAPACITY{capacity}"


def test_tune_ranks_four_candidates_deploys_the_best_and_reuses_results(bed, deployctl, tmp_path, restore_profiles):
    # the spec's own max_num_seqs is 2: the search climbs the axis the queue says binds
    path = deployctl.write(bed.spec_yaml("e2e-tune", TOPOLOGY, hosts_used=[HOST], extra=MODEL.replace(
        "max_num_seqs: 16", "max_num_seqs: 2") + ENV))
    # what the fake npu-smi prints for the candidates' two cards: each record's telemetry reads it over SSH
    bed.set_profile(HOST, stats={"0": {"aicore": 87, "hbm_used": 50000}, "1": {"aicore": 83, "hbm_used": 40000}})
    try:
        # Ctrl-C once the third candidate (seqs 8) serves and its bench has begun (events on stderr, not time)
        child = deployctl_child("tune", path, *TUNE, "--output", "json")
        try:
            assert child.stderr.wait_for(f"{label(8)} (2 card(s))", timeout=900), child.stderr.text(0)
            assert child.stderr.wait_for("bench search by concurrency", timeout=300), child.stderr.text(0)
            child.interrupt()
            code, out, err = child.finish(timeout=600)
        finally:
            child.kill()
        assert code == 130, err
        cut = json.loads(out)
        assert cut["interrupted"] and cut["stopped"].startswith(f"interrupted during {label(8)}"), cut
        assert [r["label"] for r in cut["candidates"]] == [label(4), label(2)]
        # the best finished candidate serves, not the cut one (nor the spec as written)
        assert cut["deployed"] == label(4) and max_num_seqs_running(bed) == 4
        assert http_json(bed, HOST, 8720, "/v1/models")["data"][0]["id"] == "tiny"

        code, doc = deployctl.json("tune", path, *TUNE)
        assert code == 0, doc
        reused = {r["label"]: bool(r.get("reused")) for r in doc["candidates"]}
        assert reused == {label(2): True, label(4): True, label(8): False, label(16): False, label(16, "0"): False}
        ranked = [r["label"] for r in doc["candidates"]]
        assert ranked == [label(16), label(8), label(4), label(2), label(16, "0")], doc["candidates"]
        assert [r["reason"] for r in doc["candidates"]][3] == "the spec's own layout and values"
        assert all("max_num_seqs caps the batch: more seqs" in r["reason"] for r in doc["candidates"][:3])
        loads = {r["label"]: r["max_load"] for r in doc["candidates"]}
        assert loads[label(2)] == 2 and loads[label(4)] == 4, loads
        assert loads[label(8)] == 8 and loads[label(16)] >= 16, loads
        # each measured candidate's NPU telemetry over its bench (the failed one has none)
        for record in doc["candidates"][:4]:
            telemetry = record["telemetry"]
            assert telemetry["samples"] > 0 and telemetry["device_util_mean_pct"] == 85.0, record  # (87 + 83) / 2
            assert telemetry["device_mem_max_pct"] == 100.0 * 50000 / 65536, record  # 64 GB cards (the fake's)
            assert telemetry["at_max_load"]["device_util_mean_pct"] == 85.0, record
        assert doc["candidates"][-1]["telemetry"] is None
        # the candidate the stand-in refused: recorded with its error, and the tune went on to its end
        refused = doc["candidates"][-1]
        assert refused["status"] == "failed" and "exited while starting" in refused["error"], refused
        assert "along env.STANDIN_CAPACITY" in refused["reason"]
        # the rules' refusals: counted, never deployed (no spec of theirs among the results)
        assert doc["pruned_count"] == len(doc["pruned"]) == 8
        assert all(p["reason"].startswith("model.max_num_batched_tokens") for p in doc["pruned"]), doc["pruned"]
        # the spec writes no requirements.cards: the host's own npu-smi counts them (the bed's fake says 8)
        assert doc["cards"] == {"per_host": {HOST: 8}, "from": f"the hosts' NPUs ({HOST} 8)"}, doc["cards"]
        assert doc["winner"] == doc["deployed"] == label(16) and not doc["interrupted"]
        assert (doc["measured"], doc["reused"]) == (3, 2)
        assert doc["stopped"] == "every neighbour of the best candidate was tried"
        assert max_num_seqs_running(bed) == 16  # the winner is what runs
        tuned = tmp_path / "spec.tuned.yaml"
        assert doc["tuned_spec"] == str(tuned) and "max_num_seqs: 16" in tuned.read_text()
        results = tmp_path / ".deployctl" / "e2e-tune" / "tune"
        assert len(list(results.glob("tp2-dp1-seqs*.bench.json"))) == 4
        assert not list(results.glob("*bt1024*"))

        before = container_ids(bed, HOST, "e2e-tune")
        code, again = deployctl.json("tune", path, *TUNE)
        assert code == 0, again
        assert (again["measured"], again["reused"], again["winner"]) == (0, 5, label(16))
        assert container_ids(bed, HOST, "e2e-tune") == before  # nothing redeployed, the winner kept running

        # --retry-failed: the failed candidate alone is deployed again (the stand-in refuses it again, recorded so)
        code, out, err = deployctl("tune", path, *TUNE, "--keep-original", "--retry-failed")
        assert code == 0, err
        assert f"{label(16, '0')} (2 card(s))" in err and f"{label(16, '0')}: failed before" not in err, err
        assert err.count("measured before") == 4, err
        assert "8 candidate(s) pruned by the spec's rules before any deploy" in out
        assert max_num_seqs_running(bed) == 2  # --keep-original: the spec as written serves again
    finally:
        assert deployctl("down", path, "--yes")[0] == 0


# A vllm-ascend P/D shape (the stand-in plays vllm-ascend: DP ranks per role, the load-balancing proxy in front):
# prefill on tb1, decode on tb2 (8 NPUs each), each role's tp 2 x dp 1 or 2: four layouts, every one deployed and
# measured (--grid). max_num_seqs 2 caps each decode rank's batch and the proxy deals requests round robin
# (standin/proxy_pool.py), so two decode ranks serve twice the concurrency within the TTFT SLO; prefill answers one
# token (max_tokens 1, standin/proxy.py) and never binds: 4 requests on 6 cards (p2x1-d2x2) win per card over
# 2 on 4 (p2x1-d2x1) and 4 on 8 (p2x2-d2x2).
PD_HOSTS = ["tb1", "tb2"]
PD_TOPOLOGY = """topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: tb1, port: 8730}
  prefill:
    - {hosts: [tb1], dp: 1, tp: 2, port: 9730}
  decode:
    - {hosts: [tb2], dp: 1, tp: 2, port: 9730}
"""
PD_TUNE = ("--grid", "--search", "tp=2", "--search", "dp=1,2", "--search", "max_num_seqs=2",
           "--search", "max_num_batched_tokens=2048", "--by", "concurrency", "--slo", "ttft_p99=300ms",
           "--prompt-tokens", "16", "--output-tokens", "16", "--epochs", "1", "--max-runs", "6",
           "--telemetry-interval", "0.2", "--skip", "weights", "--yes")
PD_WINNER = "p2x1-d2x2-seqs2-bt2048"


def args_of(bed, host: str, container: str) -> list[str]:
    return json.loads(bed.docker_on(host, "inspect", "--format", "{{json .Args}}", container).stdout)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def routes(bed, count: int) -> list[list[str]]:
    """The prefill and decode server each of `count` requests through the proxy went to (its trace, by their ids)."""
    ids = [f"tune-pd-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    for rid in ids:
        body = json.dumps({"model": "tiny", "prompt": "a b", "max_tokens": 2})
        bed.run_on("tb1", ["curl", "--silent", "--fail", "--max-time", "10", "-H", f"x-request-id: {rid}", "-H",
                           "content-type: application/json", "-d", body, "http://127.0.0.1:8730/v1/completions"])
    trace = {r["id"]: r for r in http_json(bed, "tb1", 8730, "/standin/trace")}
    return [trace[rid]["backends"] for rid in ids]


def test_tune_of_a_pd_spec_ranks_four_layouts_and_deploys_the_best_behind_its_proxy(bed, deployctl, tmp_path):
    path = deployctl.write(bed.spec_yaml("e2e-tune-pd", PD_TOPOLOGY, hosts_used=PD_HOSTS, extra=(
        "server: vllm-ascend\n" + MODEL.replace("max_num_seqs: 16", "max_num_seqs: 2") + ENV)))
    try:
        code, doc = deployctl.json("tune", path, *PD_TUNE)
        assert code == 0, doc
        records = {r["label"]: r for r in doc["candidates"]}
        assert set(records) == {"p2x1-d2x1-seqs2-bt2048", PD_WINNER, "p2x2-d2x1-seqs2-bt2048",
                                "p2x2-d2x2-seqs2-bt2048"}, doc["candidates"]
        assert (doc["measured"], doc["reused"], doc["pruned_count"]) == (4, 0, 0)
        assert doc["stopped"] == "the full grid was tried"
        assert doc["cards"]["per_host"] == {"tb1": 8, "tb2": 8}
        for label, record in records.items():
            assert record["status"] == "measured" and record["meets_slo"] and record["goodput_rps"] > 0, record
            assert record["cards"] == {"p2x1-d2x1": 4, "p2x1-d2x2": 6, "p2x2-d2x1": 6, "p2x2-d2x2": 8}[label[:9]]
            assert record["values"]["layout"]["decode"] == {"tp": 2, "dp": int(label[8])}, record
            assert record["goodput_per_card"] == record["goodput_rps"] / record["cards"]
            assert record["time_to_serve_s"] > 0 and record["telemetry"]["samples"] > 0, record
        # the decode ranks' batch is what binds: one rank serves 2 at once within the SLO, two serve 4
        loads = {label: r["max_load"] for label, r in records.items()}
        assert loads["p2x1-d2x1-seqs2-bt2048"] == loads["p2x2-d2x1-seqs2-bt2048"] == 2, loads
        assert loads[PD_WINNER] >= 4 and loads["p2x2-d2x2-seqs2-bt2048"] >= 4, loads
        ranked = [r["label"] for r in doc["candidates"]]
        assert ranked[0] == PD_WINNER and ranked[-1] == "p2x2-d2x1-seqs2-bt2048", ranked  # fewest per card last
        assert doc["winner"] == doc["deployed"] == PD_WINNER and doc["meets_slo"]

        # the winner runs: one prefill rank, two decode ranks launched with its tp x dp, and the proxy lists them
        assert set(container_ids(bed, "tb1", "e2e-tune-pd")) == {"e2e-tune-pd-prefill0-r0", "e2e-tune-pd-proxy"}
        assert set(container_ids(bed, "tb2", "e2e-tune-pd")) == {"e2e-tune-pd-decode0-r0", "e2e-tune-pd-decode0-r1"}
        for host, container, dp in (("tb1", "e2e-tune-pd-prefill0-r0", "1"), ("tb2", "e2e-tune-pd-decode0-r0", "2"),
                                    ("tb2", "e2e-tune-pd-decode0-r1", "2")):
            args = args_of(bed, host, container)
            assert (flag(args, "--tensor-parallel-size"), flag(args, "--data-parallel-size"),
                    flag(args, "--max-num-seqs")) == ("2", dp, "2"), args
        # the proxy was kept and its lists put to it while it served (its argv keeps the first candidate's,
        # servers/vllm_ascend/upstream.py proxy_identity): its health and four requests' routes say what it serves
        assert http_json(bed, "tb1", 8730, "/healthcheck") == {"status": "ok", "prefill_instances": 1,
                                                               "decode_instances": 2, "request_num": 0}
        prefill, decode = bed.host("tb1").address, bed.host("tb2").address
        seen = routes(bed, 4)  # round robin: each decode rank two of the four
        assert [p for p, _ in seen] == [f"{prefill}:9730"] * 4, seen
        assert sorted(d for _, d in seen) == [f"{decode}:9730"] * 2 + [f"{decode}:9731"] * 2, seen
        # the table's JSON, the plot (a point per candidate, the winner ringed) and the winning spec on disk
        results = tmp_path / ".deployctl" / "e2e-tune-pd" / "tune"
        assert json.loads((results / "tune.json").read_text())["winner"] == PD_WINNER
        svg = (results / "tune.svg").read_text()
        assert doc["plot"] == str(results / "tune.svg")
        assert svg.count("<title>") == 4 and all(f"<title>{label}: " in svg for label in records), svg
        assert svg.count('stroke="#c33"') == 1
        tuned = yaml.safe_load((tmp_path / "spec.tuned.yaml").read_text())
        assert doc["tuned_spec"] == str(tmp_path / "spec.tuned.yaml")
        assert [(g["hosts"], g["tp"], g["dp"]) for g in tuned["topology"]["decode"]] == [(["tb2"], 2, 2)]
        assert [(g["hosts"], g["tp"], g["dp"]) for g in tuned["topology"]["prefill"]] == [(["tb1"], 2, 1)]
        assert len(list(results.glob("p2x*.bench.json"))) == 4
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
    assert all(container_ids(bed, h, "e2e-tune-pd") == {} for h in PD_HOSTS)
