"""A tiny real model made on this machine (no download): a Llama config with random weights (fixed seed) and a
byte-level BPE tokenizer trained on a few lines, saved with a chat template; ~3 MB. Made once by the real-engine
venv's python (transformers, torch and tokenizers are vLLM's own dependencies) and kept in the bed's cache under
a hash of the maker itself, so a changed maker makes a new model and an unchanged one is never made twice."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.testbed import layout

SERVED_NAME = "tiny"

# Run as a script by the venv's python; argv[1] is the directory to write. The tokenizer has DeepSeek-R1's
# `<think>`/`</think>` and the chat template opens the thinking as R1's does, so `--reasoning-parser deepseek_r1`
# runs on it: random weights never close the thinking, so a chat answer streams in `delta.reasoning` only.
# head_dim = hidden_size / heads = 64: vLLM's CPU attention refuses 16.
MAKER = r'''
import json, sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
LINES = [
    "Say hello in one short sentence.",
    "Hello! How can I help you today?",
    "The quick brown fox jumps over the lazy dog.",
    "A tiny model for tests: random weights, a real tokenizer, a real engine.",
    "Benchmarks count tokens, time to first token and the time between tokens.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "Deploy, drain, roll out, watch, stop: every step proven against vLLM itself.",
]
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
           "<think>", "</think>"]

tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train_from_iterator(LINES * 4, trainer=trainer)
template = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n<think>\n{% endif %}")
fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>",
                               eos_token="<|eot_id|>", pad_token="<|end_of_text|>", chat_template=template)
fast.save_pretrained(out)

torch.manual_seed(0)
config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                     max_position_embeddings=4096, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                     pad_token_id=fast.pad_token_id, tie_word_embeddings=False, torch_dtype="float32")
model = LlamaForCausalLM(config)
model.save_pretrained(out, safe_serialization=True)
'''


def model_hash() -> str:
    return hashlib.sha256(MAKER.encode()).hexdigest()[:16]


def model_dir() -> Path:
    return layout.cache_dir() / f"tiny-llama-{model_hash()}"


def ensure_model(python: Path) -> Path:
    """The tiny model's directory, made by `python` (the real-engine venv's) when the cache lacks it."""
    target = model_dir()
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f"{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    env = {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([str(python), "-c", MAKER, str(tmp)], capture_output=True, text=True, env=env,
                            timeout=600)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"making the tiny model failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    try:
        os.rename(tmp, target)
    except OSError:  # another run made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
