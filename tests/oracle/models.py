"""The config.json of each model the rendered lines serve, for the oracle's stub models (no weights): the
architecture and the sizes vLLM's ModelConfig reads, as the published checkpoints' config.json write them.

Keyed by the path a line names (weights.dest, a drafter's `model`). A line whose model is missing here fails the
oracle test naming it, so no line's engine config is skipped silently."""

from __future__ import annotations

_QWEN3 = {"model_type": "qwen3", "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
          "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
          "hidden_act": "silu"}

# Qwen/Qwen3-32B: dense (no expert count anywhere)
QWEN3_32B = {**_QWEN3, "architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "intermediate_size": 25600,
             "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8}
# Qwen/Qwen3-235B-A22B and Qwen/Qwen3-30B-A3B: MoE, 128 experts of which 8 are active
QWEN3_235B_A22B = {**_QWEN3, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                   "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536,
                   "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "num_experts": 128,
                   "num_experts_per_tok": 8, "decoder_sparse_step": 1, "norm_topk_prob": True}
QWEN3_30B_A3B = {**QWEN3_235B_A22B, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
                 "num_hidden_layers": 48, "num_attention_heads": 32}
# an EAGLE-3 head for Qwen3-235B-A22B: one Llama layer at the target's hidden size (the architecture vLLM's
# registry maps for EAGLE-3 drafters, vllm/model_executor/models/registry.py "LlamaForCausalLMEagle3")
QWEN3_235B_EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
                     "intermediate_size": 24576, "num_hidden_layers": 1, "num_attention_heads": 64,
                     "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "draft_vocab_size": 32000,
                     "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
                     "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": False}
# deepseek-ai/DeepSeek-V3 (the w8a8 conversion keeps its shape): MoE, 256 routed experts
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
               "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
               "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8,
               "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
               "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
               "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                                     "mscale": 1.0, "mscale_all_dim": 1.0,
                                                     "original_max_position_embeddings": 4096},
               "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16",
               "hidden_act": "silu", "tie_word_embeddings": False}
# Qwen/Qwen2-7B-Instruct: dense
QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
            "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "vocab_size": 152064, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
            "sliding_window": 131072, "use_sliding_window": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
            "tie_word_embeddings": False}
# facebook/opt-125m: dense
OPT_125M = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 768, "ffn_dim": 3072,
            "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50272, "max_position_embeddings": 2048,
            "word_embed_proj_dim": 768, "do_layer_norm_before": True, "activation_function": "relu",
            "torch_dtype": "float16"}

MODEL_CONFIGS = {
    "/mnt/weights/Qwen3-235B-A22B": QWEN3_235B_A22B,
    "/mnt/weights/Qwen3-235B-A22B/eagle3": QWEN3_235B_EAGLE3,
    "/mnt/weights/Qwen3-30B-A3B": QWEN3_30B_A3B,
    "/mnt/weights/DeepSeek-V3-w8a8": DEEPSEEK_V3,
    "/mnt/weights/qwen2-7b": QWEN2_7B,
    "/mnt/weights/opt-125m": OPT_125M,
}
