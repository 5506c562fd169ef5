"""The start-up budget: the spec's health.startup_timeout, else a default that grows with the weights' size."""

from __future__ import annotations

from deployctl.spec.load import check_spec_text, load_spec_text
from deployctl.spec.startup import BASE_S, DEFAULT_S, S_PER_GB, startup_budget, weights_gb

SPEC = """\
version: 1
name: demo
server: vllm-ascend
hosts: {node1: {address: 192.0.2.31}}
image: {name: "quay.io/ascend/vllm-ascend:v0.23.0-a3"}
weights: {source: s3://models/WEIGHTS/, dest: /mnt/weights/WEIGHTS}
model: {served_name: demo MODEL}
topology:
  mode: mixed
  groups:
    - {hosts: [node1], dp: 1, tp: 8, port: 8000}
"""


def spec(weights="Qwen3-235B-A22B", model="", head=""):
    return load_spec_text(head + SPEC.replace("WEIGHTS", weights).replace(" MODEL", "").replace(
        "served_name: demo}", "served_name: demo" + model + "}"))


def test_the_spec_says():
    budget = startup_budget(spec(head="health: {startup_timeout: 5400}\n"))
    assert (budget.seconds, budget.why) == (5400, "health.startup_timeout")


def test_a_large_models_default_grows_with_its_weights():
    assert weights_gb(spec("DeepSeek-R1-671B")) == 1342  # bf16: 2 bytes a parameter
    assert startup_budget(spec("DeepSeek-R1-671B")).seconds == BASE_S + S_PER_GB * 1342
    assert weights_gb(spec("DeepSeek-R1-671B", model=", quantization: ascend")) == 671  # W8A8: 1 byte
    assert weights_gb(spec("Qwen3-235B-A22B")) == 470  # the first count, not the active experts' A22B


def test_a_small_or_unknown_model_gets_the_default():
    assert startup_budget(spec("Qwen2-7B")).seconds == DEFAULT_S  # 600 + 28 s: below the default
    budget = startup_budget(spec("DeepSeek-V3"))  # no count in any name
    assert weights_gb(spec("DeepSeek-V3")) is None and budget.seconds == DEFAULT_S
    assert "not known" in budget.why


def test_the_schema_bounds_it():
    _, errors, _ = check_spec_text("health: {startup_timeout: 10}\n" + SPEC.replace(" MODEL", ""))
    assert [(e.dotted_path, e.message) for e in errors] == [("health.startup_timeout", "10 should be at least 60")]
