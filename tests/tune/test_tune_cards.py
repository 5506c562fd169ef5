"""The tune's card budget from the hosts' own facts (real npu-smi / nvidia-smi outputs under tests/fixtures/formats)
where the spec does not write requirements.cards; the spec's count where it does."""

from __future__ import annotations

import functools
from pathlib import Path

from deployctl.facts import npu_smi, nvidia_smi
from deployctl.facts.assemble import ProbeOutput, host_facts_from
from deployctl.facts.probe import Probe
from deployctl.spec.locate import compose_document
from deployctl.tune.cards import card_budget, counted_cards
from deployctl.tune.space import build_space, parse_search, rules_check
from tests.tune.test_tune_core import ENV, SPEC

FORMATS = Path(__file__).parent.parent / "fixtures" / "formats"


def output(case: str) -> ProbeOutput:
    return ProbeOutput(0, (FORMATS / case / "stdout.txt").read_text(), "")


def npu_facts(info_case="npu-smi/info-910b3-8x64g-healthy-23.0.6", count_case="npu-smi/info-l-8cards"):
    probes = [(Probe(("npu-smi", "info"), npu_smi.parse_npu_smi_info, "npu_info", parse_failed_output=True),
               output(info_case))]
    if count_case:
        probes.append((Probe(("npu-smi", "info", "-l"), npu_smi.parse_npu_smi_count, "npu_count"), output(count_case)))
    return host_facts_from(probes)


def gpu_facts():
    fields = ("index", "name", "memory.total", "memory.used")
    probe = Probe(("nvidia-smi",), functools.partial(nvidia_smi.parse_nvidia_smi_query_gpu, fields=fields), "gpus")
    return host_facts_from([(probe, output("nvidia-smi/query-gpu-csv-noheader-nounits"))])


def test_counted_cards_read_npu_smi_or_nvidia_smi_and_say_nothing_when_the_driver_does_not_answer():
    assert counted_cards("ascend", npu_facts()) == 8  # npu-smi info -l: Total Count
    assert counted_cards("ascend", npu_facts(count_case=None)) == 8  # the info table's cards
    gpus = gpu_facts()
    assert counted_cards("gpu", gpus) == len(gpus.gpus) == len(
        (FORMATS / "nvidia-smi/query-gpu-csv-noheader-nounits/stdout.txt").read_text().splitlines())
    assert counted_cards("ascend", npu_facts("npu-smi/info-dcmi-init-failed-8005", None)) is None
    assert counted_cards("ascend", None) is None and counted_cards("gpu", npu_facts()) is None


def test_the_spec_written_count_wins_else_each_hosts_facts_else_the_rules_default():
    written = {"requirements": {"cards": 4}}
    assert card_budget(written, ["a", "b"], {"a": npu_facts()}) == ({"a": 4, "b": 4}, "requirements.cards")
    cards, said = card_budget({}, ["a", "b"], {"a": npu_facts(), "b": npu_facts("npu-smi/info-dcmi-init-failed-8005",
                                                                                None)})
    assert cards == {"a": 8, "b": 8}
    assert said == "the hosts' NPUs (a 8, b 8); no count from b: the rules' default 8"
    gpus = gpu_facts()
    cards, said = card_budget({"platform": "gpu"}, ["g"], {"g": gpus})
    assert cards == {"g": len(gpus.gpus)} and said.startswith("the hosts' GPUs (g ")


def test_a_host_with_fewer_cards_than_the_rules_default_is_offered_no_layout_beyond_them():
    # no requirements.cards: validate assumes 8 per host, but this host's npu-smi counts 2 (the 8-card answer cut
    # to its first two cards, as a 2-card host prints it)
    text = SPEC.replace("requirements: {cards: 4, npu_memory_gb: 32}\n", "requirements: {npu_memory_gb: 32}\n")
    document = compose_document(text, ENV, "spec.yaml")
    eight = (FORMATS / "npu-smi/info-l-8cards/stdout.txt").read_text()
    two = eight.replace("Total Count                    : 8", "Total Count                    : 2")
    two = two[:two.index("\tNPU ID                         : 2")]
    probe = Probe(("npu-smi", "info", "-l"), npu_smi.parse_npu_smi_count, "npu_count")
    cards, said = card_budget(document.data, ["n1"], {"n1": host_facts_from([(probe, ProbeOutput(0, two, ""))])})
    assert cards == {"n1": 2} and said == "the hosts' NPUs (n1 2)"
    search = parse_search(["max_num_seqs=8", "max_num_batched_tokens=4096"])
    found = build_space(document.data, document.references, cards, search, rules_check("spec.yaml", None, ENV))
    assert [c.label for c in found.valid] == ["tp2-dp1-seqs8-bt4096"]  # tp 1 is too few for the model
    default = build_space(document.data, document.references, {"n1": 8}, search, rules_check("spec.yaml", None, ENV))
    assert "tp4-dp1-seqs8-bt4096" in [c.label for c in default.valid]  # what the rules alone would have offered
