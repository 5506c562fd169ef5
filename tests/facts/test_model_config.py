"""config.json -> whether the model is a mixture of experts, read as vLLM reads it (vLLM 0.33.0
vllm/transformers_utils/config.py:64-69 and model_arch_config_convertor.py:159-190)."""

from __future__ import annotations

import json

from deployctl.facts.model_config import ModelShape, parse_model_config


def shape(doc) -> ModelShape:
    return parse_model_config(json.dumps(doc))


def test_each_name_vllm_reads_for_the_expert_count():
    assert shape({"model_type": "qwen3_moe", "num_experts": 128}) == ModelShape(128, "num_experts", "qwen3_moe")
    assert shape({"model_type": "deepseek_v3", "n_routed_experts": 256}) == ModelShape(256, "n_routed_experts", "deepseek_v3")
    assert shape({"model_type": "mixtral", "num_local_experts": 8}).moe
    assert shape({"model_type": "dbrx", "moe_num_experts": 16}).moe


def test_a_dense_model_a_zero_count_and_what_is_not_a_config():
    assert shape({"model_type": "qwen3", "hidden_size": 5120}) == ModelShape(0, None, "qwen3")
    assert not shape({"model_type": "qwen2", "num_experts": 0}).moe
    assert not shape({"num_experts": True}).moe  # a flag, not a count
    assert parse_model_config("not json") is None and parse_model_config("[1]") is None


def test_a_multimodal_models_text_config_a_list_and_block_configs():
    assert shape({"model_type": "qwen3_vl_moe", "text_config": {"num_experts": 128}}).moe
    assert not shape({"model_type": "qwen3_vl", "num_experts": 4, "text_config": {"hidden_size": 8}}).moe
    assert shape({"moe_num_experts": [64, 64]}) == ModelShape(64, "moe_num_experts")  # Ernie VL
    blocks = {"block_configs": [{"block_type": "mamba"}, {"block_type": "moe", "n_routed_experts": 32}]}
    assert shape(blocks) == ModelShape(32, "block_configs")  # NemotronH


def test_the_model_type_is_read_from_the_top_level_config():
    # vllm-ascend tells DeepSeek-V4 by it (HEAD:vllm_ascend/attention/dsa_v1.py:400)
    assert shape({"model_type": "deepseek_v4", "n_routed_experts": 256}).model_type == "deepseek_v4"
    assert shape({"model_type": "qwen3_vl_moe", "text_config": {"model_type": "x", "num_experts": 8}}).model_type \
        == "qwen3_vl_moe"
    assert shape({"model_type": 3}).model_type is None
