"""What a model's config.json says about its shape, read as vLLM reads it (pure): whether it is a mixture of experts.

vLLM calls a model MoE when its text config names a number of experts above 0 (vLLM 0.33.0 vllm/config/model.py:2294
`is_moe`, vllm/transformers_utils/model_arch_config_convertor.py:179-190 `get_num_experts`), under any of the names of
vllm/transformers_utils/config.py:64-69, in the `text_config` of a multimodal model (config.py:1258), or in
`block_configs` of type moe (convertor :159-177)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

CONFIG_NAME = "config.json"
MAX_BYTES = 4 << 20  # a config.json is a few KB; anything this large is not one
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")


@dataclass(frozen=True)
class ModelShape:
    """A model's experts as its config.json counts them; `key` names the field that said so (None: none did)."""

    experts: int
    key: Optional[str]
    model_type: Optional[str] = None  # config.json's model_type (`deepseek_v4`), as vLLM's registry reads it

    @property
    def moe(self) -> bool:
        return self.experts > 0


def parse_model_config(text: str) -> Optional[ModelShape]:
    """The shape config.json describes, or None when the text is no JSON object."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    text_config = doc.get("text_config")
    config = text_config if isinstance(text_config, dict) else doc
    model_type = doc.get("model_type") if isinstance(doc.get("model_type"), str) else None
    for key in EXPERT_KEYS:
        value = config.get(key)
        if isinstance(value, list) and value:  # Ernie VL lists one count per modality, all equal
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return ModelShape(value, key, model_type)
    blocks = config.get("block_configs")
    counts = [b.get("n_routed_experts", 0) for b in blocks if isinstance(b, dict) and b.get("block_type") == "moe"] \
        if isinstance(blocks, list) else []
    counts = [n for n in counts if isinstance(n, int) and not isinstance(n, bool)]
    if counts and max(counts) > 0:
        return ModelShape(max(counts), "block_configs", model_type)
    return ModelShape(0, None, model_type)
