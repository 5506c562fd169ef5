"""The stand-in prints vLLM's start-up lines at vLLM's moments and keeps a torch.compile cache: compiled once
(STANDIN_COMPILE_S), loaded from $VLLM_CACHE_ROOT the next time (standin/startup.py)."""

from __future__ import annotations

import re

from deployctl.facts.startup_log import milestones_of
from deployctl.spec.profiles import vllm_startup
from tests.images.test_standin import MIXED, dev_dir, launch, vllm_args, weights  # noqa: F401 (fixtures)
from tests.ports import free_port


def _start(launch, weights, tmp_path, cache, name):  # noqa: F811
    port = free_port()
    env = {"STANDIN_DEV_DIR": str(dev_dir(tmp_path, [0, 1], name)), "VLLM_CACHE_ROOT": str(cache),
           "STANDIN_COMPILE_S": "0.2"}
    server = launch(MIXED, vllm_args(weights, port), env, port)
    server.proc.terminate()
    server.proc.wait(timeout=5)
    return server.output()


def test_compiles_cold_then_loads_from_its_cache(launch, weights, tmp_path):  # noqa: F811
    cache = tmp_path / "cache"
    cold = _start(launch, weights, tmp_path, cache, "dev1")
    assert "Loading weights took" in cold
    assert re.search(r"torch\.compile took [0-9.]+ s in total", cold)
    assert "Directly load the compiled graph" not in cold
    assert list(cache.glob("torch_compile_cache/*/standin-compiled.json")), "the marker is written after compiling"
    warm = _start(launch, weights, tmp_path, cache, "dev2")
    assert "Directly load the compiled graph(s) for compile range" in warm
    assert "torch.compile took" not in warm
    # the order vLLM prints them in: weights, graphs, then uvicorn's line once listening
    for text in (cold, warm):
        order = [text.index(s) for s in ("Loading weights took", "Graph capturing finished", "Application startup complete.")]
        assert order == sorted(order)


def test_another_key_is_never_reused(launch, weights, tmp_path):  # noqa: F811
    cache = tmp_path / "cache"
    _start(launch, weights, tmp_path, cache, "dev1")
    marker = next(cache.glob("torch_compile_cache/*/standin-compiled.json"))
    marker.write_text('{"key": "another"}')
    again = _start(launch, weights, tmp_path, cache, "dev2")
    assert "torch.compile took" in again


def test_its_lines_match_the_profile_patterns():
    """Every phase the ledger reads from vLLM's log is found in what the stand-in prints."""
    lines = ["2026-11-25T10:00:01.000000000Z INFO 11-25 10:00:01 [default_loader.py:507] Loading weights took 0.50 seconds",
             "2026-11-25T10:00:03.000000000Z INFO 11-25 10:00:03 [monitor.py:20] torch.compile took 2.00 s in total",
             "2026-11-25T10:00:03.100000000Z INFO 11-25 10:00:03 [gpu_model_runner.py:6517] Graph capturing finished "
             "in 0 secs, took 0.00 GiB",
             "2026-11-25T10:00:03.200000000Z INFO:     Application startup complete."]
    found = milestones_of("2026-11-25T10:00:00.000000000Z", lines, vllm_startup().log)
    assert set(found.ended) == {"weights_loaded", "graph_compiled", "server_ready"}
