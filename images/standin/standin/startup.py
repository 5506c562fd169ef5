"""What vLLM prints as it starts, at the same moments, and its torch.compile cache (for deployctl's time-to-serve
ledger and compile-cache reuse).

The lines are vLLM's own, in vLLM's log format (vLLM 0.33.0 vllm/logger.py:28-33: `LEVEL MM-DD HH:MM:SS
[file:line] message`):
- after the weights: `Loading weights took %.2f seconds` (vllm/model_executor/model_loader/default_loader.py:507);
- a compile cache miss: `Compiling a graph for compile range %s takes %.2f s` (vllm/compilation/backends.py:418),
  then `torch.compile took %.2f s in total` (vllm/compilation/monitor.py:20);
- a hit: `Directly load the compiled graph(s) for compile range %s from the cache, took %.3f s`
  (vllm/compilation/backends.py:311);
- then `Graph capturing finished in %.0f secs, took %.2f GiB` (vllm/v1/worker/gpu_model_runner.py:6517);
- once listening, uvicorn's `Application startup complete.` (uvicorn/lifespan/on.py:62).

The cache lives where vLLM keeps it: $VLLM_CACHE_ROOT (default ~/.cache/vllm, vllm/envs.py:714)
/torch_compile_cache/<hash>/ (vllm/compilation/backends.py:1096), the hash over what shapes the graphs (here: the
model directory, tp, dp and the vLLM version). Compiling takes STANDIN_COMPILE_S seconds (default 0); a directory
that holds the marker written after compiling is loaded instead, in STANDIN_COMPILE_HIT_S (default 0.05). With
neither VLLM_CACHE_ROOT nor STANDIN_COMPILE_S set it prints the lines and touches no file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from typing import Mapping

MARKER = "standin-compiled.json"  # vLLM keeps its compiled artifacts here; the stand-in keeps a note of the key
RANGE = "(1, 8192)"


def vllm_line(source: str, message: str, level: str = "INFO") -> None:
    """One line as vLLM's logger writes it."""
    print(f"{level} {time.strftime('%m-%d %H:%M:%S')} [{source}] {message}", flush=True)


def cache_root(env: Mapping[str, str]) -> str:
    return env.get("VLLM_CACHE_ROOT") or os.path.join(os.path.expanduser("~"), ".cache", "vllm")


def compile_key(model: str, tp: int, dp: int, version: str) -> str:
    blob = json.dumps({"model": model, "tp": tp, "dp": dp, "vllm": version}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return max(0.0, float(env.get(name, "") or default))
    except ValueError:
        return default


async def loaded_weights(seconds: float) -> None:
    vllm_line("default_loader.py:507", f"Loading weights took {seconds:.2f} seconds")


async def compile_graphs(env: Mapping[str, str], key: str) -> bool:
    """Compile, or load the compiled graphs from the cache; True on a cache hit."""
    if not env.get("VLLM_CACHE_ROOT") and not env.get("STANDIN_COMPILE_S"):
        # nothing asked of the cache: the lines only, no files under the home directory of whoever runs it
        vllm_line("monitor.py:20", "torch.compile took 0.00 s in total")
        vllm_line("gpu_model_runner.py:6517", "Graph capturing finished in 0 secs, took 0.00 GiB")
        return False
    directory = os.path.join(cache_root(env), "torch_compile_cache", key)
    marker = os.path.join(directory, MARKER)
    vllm_line("backends.py:1126", f"Using cache directory: {directory} for vLLM's torch.compile")
    started = time.monotonic()
    try:
        with open(marker) as f:
            hit = json.load(f).get("key") == key
    except (OSError, ValueError, AttributeError):
        hit = False
    if hit:
        await asyncio.sleep(_seconds(env, "STANDIN_COMPILE_HIT_S", 0.05))
        vllm_line("backends.py:311", f"Directly load the compiled graph(s) for compile range {RANGE} from the cache, "
                                     f"took {time.monotonic() - started:.3f} s")
    else:
        await asyncio.sleep(_seconds(env, "STANDIN_COMPILE_S", 0.0))
        took = time.monotonic() - started
        vllm_line("backends.py:418", f"Compiling a graph for compile range {RANGE} takes {took:.2f} s")
        try:
            os.makedirs(directory, exist_ok=True)
            with open(marker + ".tmp", "w") as f:
                json.dump({"key": key, "compiled_s": round(took, 3)}, f)
            os.replace(marker + ".tmp", marker)
        except OSError as exc:  # vLLM goes on without its cache when the directory is not writable
            vllm_line("backends.py:1126", f"cannot write the compile cache: {exc}", level="WARNING")
        vllm_line("monitor.py:20", f"torch.compile took {took:.2f} s in total")
    vllm_line("gpu_model_runner.py:6517", "Graph capturing finished in 0 secs, took 0.00 GiB")
    return hit


def startup_complete() -> None:
    """uvicorn's line once the API server listens."""
    print("INFO:     Application startup complete.", flush=True)
