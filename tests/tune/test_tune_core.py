"""The tune core on plain data: candidates from a spec and its hosts' cards, pruned by validate's rules, the spec
text written back without secrets, records from bench documents, the ranking, and the smart next step."""

from __future__ import annotations

import pytest

from deployctl.errors import UsageError
from deployctl.spec.locate import compose_document
from deployctl.tune.result import binding, failed, measured, rank
from deployctl.tune.space import LAYOUT, SEQS, build_space, parse_search, rules_check
from deployctl.tune.step import Budget, next_step

# llama2-13b on 32 GB cards needs 2 (deployctl/data/models.json): the rules' minimum is tp 2
SPEC = """version: 1
name: tune-unit
hosts:
  n1: {address: 192.0.2.11}
requirements: {cards: 4, npu_memory_gb: 32}
image: {name: "deployctl/vllm-ascend:6.3.909"}
weights: {source: "obs://models/llama2-13b/", dest: /mnt/weights/llama2-13b}
model: {served_name: llama2-13b, max_model_len: 4096, max_num_seqs: 8, max_num_batched_tokens: 4096}
env: {HF_TOKEN: "${TUNE_SECRET}", LITERAL: "$${NOT_A_VAR}"}
topology:
  mode: mixed
  instances:
    - {host: n1, devices: [0, 1], port: 8080}
"""
ENV = {"TUNE_SECRET": "hunter2-secret"}


def space(search=(), text=SPEC, cards=None):
    document = compose_document(text, ENV, "spec.yaml")
    return build_space(document.data, document.references, cards or {"n1": 4}, parse_search(list(search)),
                       rules_check("spec.yaml", None, ENV))


def labels(candidates):
    return [c.label for c in candidates]


def test_parse_search_reads_numbers_short_keys_and_refuses_bad_words():
    assert parse_search(["max_num_seqs=4,8,8", "env.MODE=fast,slow", "tp=1,2"]) == {
        SEQS: (4, 8), "env.MODE": ("fast", "slow"), "tp": (1, 2)}
    for bad in ("max_num_seqs", "=1", "tp=0", "tp=a"):
        with pytest.raises(UsageError):
            parse_search([bad])
    with pytest.raises(UsageError, match="twice"):
        parse_search(["max_num_seqs=1", "model.max_num_seqs=2"])


def test_candidates_cover_tp_and_dp_within_the_cards_and_the_rules_prune_with_reasons():
    found = space(["max_num_seqs=8", "max_num_batched_tokens=2048,4096"])
    assert labels(found.valid) == ["tp2-dp1-seqs8-bt4096", "tp2-dp2-seqs8-bt4096", "tp4-dp1-seqs8-bt4096"]
    reasons = {p.candidate.label: p.reason for p in found.pruned}
    # tp 1 is under the model's minimum; 2048 batched tokens is under max_model_len: both validate errors
    assert "tp1-dp1-seqs8-bt4096" in reasons and "tp1-dp4-seqs8-bt4096" in reasons
    assert reasons["tp1-dp1-seqs8-bt4096"].startswith("topology.instances[0].devices")
    assert all(reasons[f"{layout}-seqs8-bt2048"].startswith("model.max_num_batched_tokens")
               for layout in ("tp2-dp1", "tp2-dp2", "tp4-dp1"))
    assert found.original.label == "tp2-dp1-seqs8-bt4096" and found.cards[found.original] == 2


def test_candidate_text_keeps_references_and_places_instances():
    found = space(["max_num_seqs=8", "max_num_batched_tokens=4096", "tp=2", "dp=2"])
    (candidate,) = found.valid
    text = found.texts[candidate]
    assert "hunter2" not in text and "${TUNE_SECRET}" in text and "$${NOT_A_VAR}" in text
    data = compose_document(text, ENV, "c.yaml").data
    assert [(i["devices"], i["port"]) for i in data["topology"]["instances"]] == [([0, 1], 8080), ([2, 3], 8081)]
    assert data["env"] == {"HF_TOKEN": "hunter2-secret", "LITERAL": "${NOT_A_VAR}"}


def test_default_seqs_axis_halves_and_doubles_the_spec_value():
    found = space(["tp=2", "dp=1", "max_num_batched_tokens=4096"])
    assert labels(found.valid) == ["tp2-dp1-seqs4-bt4096", "tp2-dp1-seqs8-bt4096", "tp2-dp1-seqs16-bt4096"]


def bench(max_meeting, first_missing, telemetry=None, violations=("ttft_p99",), goodput=2.0, knee=None):
    runs = [{"parallel_num": max_meeting, "failed": 0, "slo": {"met": True, "violations": [],
                                                              "goodput_request_throughput": goodput,
                                                              "goodput_output_token_throughput": goodput * 16}}]
    if first_missing is not None:
        runs.append({"parallel_num": first_missing, "failed": 0, "telemetry": telemetry or {},
                     "slo": {"met": False, "violations": [{"slo": v} for v in violations],
                             "goodput_request_throughput": 0.1}})
    return {"mode": "static", "runs": runs, "knee": knee,
            "search": {"by": "concurrency", "max_meeting": max_meeting, "first_missing": first_missing}}


def test_binding_reads_the_first_missing_run():
    assert binding(bench(4, 5, {"kv_cache_usage_max": 1.0, "waiting_max": 3, "preemptions": 2})) == "kv_cache"
    assert binding(bench(4, 5, {"kv_cache_usage_max": 0.5, "waiting_max": 3, "preemptions": 0})) == "queue"
    assert binding(bench(4, 5, violations=("ttft_p99",))) == "ttft"
    assert binding(bench(4, 5, violations=("ttft_p99", "tpot_p99"))) == "tpot"
    assert binding(bench(64, None)) == "none"


def test_binding_is_the_batch_cap_when_an_engine_ran_max_num_seqs_though_no_sample_saw_one_waiting():
    """The real vLLM engine on the bed, max_num_seqs 1 at concurrency 4: TTFT p99 1.9 s, the one tick mid-run read
    running 1 and waiting 0 (the queue had drained by then); main said TTFT (prefill) bound it."""
    engines = {"re-tune-mixed-0": {"running_max": 1.0, "waiting_max": 0.0, "kv_cache_usage_max": 0.0002}}
    seen = {"kv_cache_usage_max": 0.0002, "waiting_max": 0.0, "engines": engines}
    assert measured({"model.max_num_seqs": 1}, "a", 1, "r", bench(2, 4, seen), 1.0)["binding"] == "queue"
    assert binding(bench(2, 4, seen), max_num_seqs=1) == "queue"
    # below the cap, or TPOT broken too (a full decode batch: fewer seqs), it stays as it was
    assert binding(bench(2, 4, seen), max_num_seqs=2) == "ttft"
    assert binding(bench(2, 4, seen, violations=("ttft_p99", "tpot_p99")), max_num_seqs=1) == "tpot"
    assert binding(bench(2, 4, seen)) == "ttft"


def test_measured_record_and_ranking_prefer_slo_then_goodput_per_card_then_fewer_cards():
    a = measured({}, "a", 2, "r", bench(4, 5, goodput=4.0), 12.5)
    assert (a["goodput_rps"], a["goodput_per_card"], a["max_load"], a["time_to_serve_s"]) == (4.0, 2.0, 4, 12.5)
    b = measured({}, "b", 4, "r", bench(8, 9, goodput=8.0), 1.0)  # same per card, more cards
    c = measured({}, "c", 1, "r", bench(1, 2, goodput=3.0), 1.0)  # the most per card
    missing = measured({}, "d", 1, "r", bench(None, 1, goodput=0.0), 1.0)
    broken = failed({}, "e", 1, "r", "did not start")
    assert [r["label"] for r in rank([broken, missing, b, a, c])] == ["c", "a", "b", "d", "e"]


def test_next_step_starts_at_the_spec_then_the_minimum_then_follows_the_binding_axis():
    found = space(["max_num_batched_tokens=4096", "max_num_seqs=4,8,16"])
    records, order = {}, []

    def run(binding_text, goodput=1.0):
        step = next_step(found, records, order, Budget(candidates=10))
        assert step.candidate is not None, step.reason
        order.append(step.candidate)
        records[step.candidate] = {"status": "measured", "binding": binding_text, "label": step.candidate.label,
                                   "meets_slo": True, "goodput_per_card": goodput, "cards": found.cards[step.candidate]}
        return step

    first = run("queue")
    assert (first.candidate.label, first.reason) == ("tp2-dp1-seqs8-bt4096", "the spec's own layout and values")
    # the spec's own point is also the rules' minimum here (tp 1 is pruned): the binding decides next
    more = run("kv_cache")
    assert more.candidate.label == "tp2-dp1-seqs16-bt4096" and "max_num_seqs caps the batch: more seqs" in more.reason
    # seqs 16 filled the cache: fewer seqs (8) was measured already, so more cards
    wider = run("none")
    assert wider.candidate.label == "tp2-dp2-seqs16-bt4096" and wider.reason.endswith("KV cache was full "
                                                                                     "(requests preempted or waiting for blocks): more cards")
    # nothing bound at 4 cards: fewer cards is measured, more seqs is off the axis, and the best's (2 cards, seqs 16)
    # neighbours are all measured: not the full grid (tp 4, seqs 4 stay untried)
    after = next_step(found, records, order, Budget(candidates=10))
    assert (after.candidate, after.reason) == (None, "every neighbour of the best candidate was tried")
    assert len(found.valid) == 9 and len(order) == 3


def test_next_step_moves_down_on_a_full_cache_and_stops_at_the_budget():
    found = space(["max_num_batched_tokens=4096", "max_num_seqs=4,8,16", "tp=2", "dp=1"])
    first = next_step(found, {}, [], Budget(candidates=2))
    records = {first.candidate: {"status": "measured", "binding": "kv_cache", "label": first.candidate.label}}
    second = next_step(found, records, [first.candidate], Budget(candidates=2))
    assert second.candidate.get(SEQS) == 4 and "KV cache was full" in second.reason and "fewer seqs" in second.reason
    stop = next_step(found, records, [first.candidate, second.candidate], Budget(candidates=2))
    assert stop.candidate is None and stop.reason == "budget spent: 2 candidate(s)"
    assert next_step(found, {}, [], Budget(seconds=60), elapsed_s=61).reason == "budget spent: 60 s"


def test_next_step_tries_the_rules_minimum_second_and_fewer_cards_when_nothing_binds():
    text = SPEC.replace("devices: [0, 1]", "devices: [0, 1, 2, 3]")
    found = space(["max_num_batched_tokens=4096", "max_num_seqs=8"], text=text)
    first = next_step(found, {}, [], Budget())
    assert first.candidate.layout.label == "tp4-dp1"
    records = {first.candidate: {"status": "measured", "binding": "none", "label": first.candidate.label,
                                 "meets_slo": True, "goodput_per_card": 1.0, "cards": 4}}
    second = next_step(found, records, [first.candidate], Budget())
    assert second.candidate.layout.label == "tp2-dp1" and second.reason.startswith("the rules' minimum: ")
    assert found.axes[0].key == LAYOUT


def test_budget_is_a_count_or_a_duration_and_bad_ones_are_usage_errors():
    from deployctl.commands.tune import parse_budget

    assert parse_budget("4") == Budget(candidates=4)
    assert parse_budget("90s") == Budget(seconds=90) and parse_budget("2h") == Budget(seconds=7200)
    assert parse_budget(None) == Budget()
    for bad in ("0", "-1", "2d", "1.5", "m"):
        with pytest.raises(UsageError, match="--budget"):
            parse_budget(bad)


def test_tune_refuses_bad_flags_at_the_cli_edge_without_a_traceback(tmp_path, capsys):
    from deployctl.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("${TUNE_SECRET}", "x"))
    for flags, said in ((["--slo", "ttft_p99=1s", "--budget", "2d"], "--budget '2d'"),
                        (["--slo", "ttft=1s"], "--slo 'ttft=1s'"),
                        (["--slo", "ttft_p99=1s", "--search", "max_num_seqs"], "--search 'max_num_seqs'")):
        assert main(["tune", str(spec), *flags]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
    assert not (tmp_path / ".deployctl").exists()  # nothing written, nothing deployed


def test_plot_is_an_svg_with_every_measured_candidate_and_the_pareto_front():
    import xml.etree.ElementTree as ET

    from deployctl.tune.plot import pareto, tune_svg

    records = [measured({}, "small", 2, "r", bench(4, 5, goodput=4.0), 1.0),
               measured({}, "big", 4, "r", bench(8, 9, goodput=8.0), 1.0),
               measured({}, "waste", 4, "r", bench(4, 5, goodput=3.0), 1.0),
               failed({}, "broken", 1, "r", "did not start")]
    assert [r["label"] for r in pareto(records)] == ["small", "big"]
    root = ET.fromstring(tune_svg(records, "t <&>", "big"))
    circles = root.findall("{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 3 + 1  # the measured three, the winner's ring
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == 1


def test_the_search_never_picks_a_pruned_candidate_and_goes_on_after_one_that_failed_to_start():
    found = space(["max_num_seqs=4,8,16", "max_num_batched_tokens=2048,4096"])
    pruned = {p.candidate for p in found.pruned}
    # 7 layouts x 3 x 2: bt2048 under max_model_len, tp 1 under the model's minimum
    assert len(pruned) == 33 and len(found.valid) == 9
    records, order = {}, []
    while True:
        step = next_step(found, records, order, Budget())
        if step.candidate is None:
            break
        assert step.candidate not in pruned and step.candidate in found.texts
        order.append(step.candidate)
        # the first candidate fails to start: recorded with its error, the search goes on from the next
        records[step.candidate] = (failed({}, step.candidate.label, found.cards[step.candidate], step.reason,
                                          "e2e-mixed-0 exited while starting") if len(order) == 1 else
                                   measured({}, step.candidate.label, found.cards[step.candidate], step.reason,
                                            bench(4, 5, violations=("tpot_p99",)), 1.0))
    assert records[order[0]]["status"] == "failed" and len(order) > 1
    assert [r["label"] for r in rank(list(records.values()))][-1] == order[0].label  # a failure ranks last


# a P/D shape as vllm-ascend writes it (DP groups per role; the stand-in's shape on the bed, tests/e2e/
# test_vllm_ascend.py): prefill on one 8-card host, decode on another
PD = """version: 1
name: tune-pd
server: vllm-ascend
hosts:
  n1: {address: 192.0.2.11}
  n2: {address: 192.0.2.12}
requirements: {cards: 8}
image: {name: "quay.io/ascend/vllm-ascend:v0.23.0"}
weights: {dest: /mnt/weights/qwen}
model: {served_name: qwen, max_model_len: 4096, max_num_seqs: 16, max_num_batched_tokens: 4096}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: n1, port: 8000}
  prefill:
    - {hosts: [n1], dp: 1, tp: 2, port: 9100}
  decode:
    - {hosts: [n2], dp: 2, tp: 2, port: 9100}
"""


def pd_space(search=("max_num_seqs=16", "max_num_batched_tokens=4096")):
    return space(list(search), text=PD, cards={"n1": 8, "n2": 8})


def test_a_pd_spec_searches_tp_and_dp_per_role_within_each_roles_hosts():
    found = pd_space()
    assert found.original.label == "p2x1-d2x2-seqs16-bt4096" and found.cards[found.original] == 6
    for candidate in found.valid:
        (_, ptp, pdp), (_, dtp, ddp) = candidate.layout.roles
        assert ptp * pdp <= 8 and dtp * ddp <= 8  # each role within its own host's cards, never the other's
        assert ptp >= dtp  # vllm-ascend's rule, applied by validate's own checker
    # a role over its hosts' cards is not even a candidate; what the rules refuse is pruned with their words
    labels_all = {c.label for c in found.valid} | {p.candidate.label for p in found.pruned}
    assert "p2x5-d1x1-seqs16-bt4096" not in labels_all and "p8x1-d8x1-seqs16-bt4096" in labels_all
    reasons = {p.candidate.label: p.reason for p in found.pruned}
    assert reasons["p1x1-d2x1-seqs16-bt4096"].startswith("topology.prefill[0].tp: prefill tp 1 is smaller than "
                                                         "decode tp 2")
    assert len(found.valid) + len(found.pruned) == len(labels_all)


def test_a_pd_candidate_rewrites_each_roles_group_and_keeps_its_hosts():
    found = pd_space(["max_num_seqs=16", "max_num_batched_tokens=4096", "tp=4", "dp=1,2"])
    candidate = next(c for c in found.valid if c.label == "p4x2-d4x1-seqs16-bt4096")
    data = compose_document(found.texts[candidate], ENV, "c.yaml").data
    prefill, decode = data["topology"]["prefill"], data["topology"]["decode"]
    assert [(g["hosts"], g["tp"], g["dp"]) for g in prefill] == [(["n1"], 4, 2)]
    assert [(g["hosts"], g["tp"], g["dp"]) for g in decode] == [(["n2"], 4, 1)]


def test_a_ttft_bound_pd_candidate_moves_cards_to_prefill_within_its_cards():
    found = pd_space()
    first = next_step(found, {}, [], Budget())
    assert first.candidate == found.original
    records = {found.original: {"status": "measured", "binding": "none", "label": found.original.label,
                                "meets_slo": True, "goodput_per_card": 1.0, "cards": 6}}
    minimum = next_step(found, records, [found.original], Budget())
    assert minimum.reason.startswith("the rules' minimum") and minimum.candidate.label == "p1x1-d1x1-seqs16-bt4096"
    # the spec's own layout measured last, TTFT-bound: more prefill cards on no more cards than it had
    records[minimum.candidate] = {"status": "measured", "binding": "none", "label": minimum.candidate.label,
                                  "meets_slo": True, "goodput_per_card": 0.5, "cards": 2}
    records[found.original]["binding"] = "ttft"
    more = next_step(found, records, [minimum.candidate, found.original], Budget())
    (_, ptp, pdp), (_, dtp, ddp) = more.candidate.layout.roles
    assert more.reason.endswith("TTFT broke its limit first (prefill): more prefill"), more.reason
    assert ptp * pdp > 2 and ptp * pdp + dtp * ddp <= 6 and ptp >= dtp


def test_grid_step_tries_every_valid_candidate_in_order_within_the_budget():
    from deployctl.tune.step import grid_step

    found = space(["max_num_seqs=4,8", "max_num_batched_tokens=4096"])
    order = []
    while (step := grid_step(found, order, Budget())).candidate is not None:
        order.append(step.candidate)
    assert order == found.valid and step.reason == "the full grid was tried"
    assert grid_step(found, [], Budget(candidates=1)).reason.startswith("the full grid (--grid): 1 of ")
    assert grid_step(found, order[:1], Budget(candidates=1)).reason == "budget spent: 1 candidate(s)"
