"""The seed 000 model table and how a spec's model is matched to it."""

from __future__ import annotations

import pytest

from deployctl.spec.known_models import CardLimits, family_for, match_family, memory_class, model_table
from deployctl.spec.schema import load_schema


def test_table_rows_as_in_the_seed_appendix():
    table = model_table()
    assert len(table) == 38
    assert (table["llama3-70b"].on_32gb, table["llama3-70b"].on_64gb) == (CardLimits(8, 32), CardLimits(4, 64))
    assert (table["baichuan2-13b"].on_32gb, table["baichuan2-13b"].on_64gb) == (CardLimits(2, 4), CardLimits(1, 4))
    assert table["qwen1.5-110b"].on_32gb is None and table["qwen1.5-110b"].on_64gb == CardLimits(8, 128)
    assert table["falcon-11b"].on(64).max_model_len == 64 * 1024


def test_schema_family_enum_is_the_table():
    assert load_schema()["properties"]["model"]["properties"]["family"]["enum"] == list(model_table())


@pytest.mark.parametrize("text, family", [
    ("Llama-2-13b-chat-hf", "llama2-13b"),
    ("llama2-70b", "llama2-70b"),           # never llama2-7b inside llama2-70b
    ("Llama-2-7b", "llama2-7b"),
    ("llama-7b", "llama-7b"),
    ("Meta-Llama-3-8B-Instruct", "llama3-8b"),
    ("Qwen1.5-0.5B-Chat", "qwen1.5-0.5b"),
    ("Qwen1.5-72B-Chat", "qwen1.5-72b"),
    ("qwen-72b", "qwen-72b"),
    ("qwen2_72b_instruct", "qwen2-72b"),
    ("deepseek-coder-33b-instruct", "deepseek-coder-instruct-33b"),
    ("deepseek-llm-67b-chat", "deepseek-llm-67b"),
    ("Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("chatglm3_6b", "chatglm3-6b"),
    ("glm-4-9b-chat", "glm-4-9b"),
    ("Yi-34B", "yi-34b"),
    ("Qwen2.5-7B-Instruct", None),          # not in the table: no check rather than a wrong one
    ("opt-125m", None),
    ("my-model", None),
])
def test_match_family(text, family):
    assert match_family(text) == family


@pytest.mark.parametrize("memory, size", [(32, 32), (64, 64), (48, 32), (96, 64), (16, None), (None, None)])
def test_memory_class_is_the_nearest_not_above(memory, size):
    assert memory_class(memory) == size


def test_family_precedence():
    assert family_for("yi-9b", "llama3-8b", None, None) == "yi-9b"
    assert family_for(None, "llama3-8b", "obs://b/qwen2-7b/", None) == "llama3-8b"
    assert family_for(None, "chat", "obs://b/models/Qwen2-7B-Instruct/", "/mnt/x") == "qwen2-7b"
    assert family_for(None, "chat", "obs://b/models/x/", "/mnt/weights/gemma-2b") == "gemma-2b"
    assert family_for(None, "chat", None, None) is None
