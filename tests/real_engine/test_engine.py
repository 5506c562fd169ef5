"""deployctl's run-time behaviour against the real vLLM engine (CPU build, tiny model): what only it can show."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from deployctl.cli import main

pytestmark = pytest.mark.real_engine


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, process name) of every process whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if int(rest[1]) == pid:
            found.append((int(stat.parent.name), name))
    return found


def test_the_server_is_the_real_vllm_engine(engine):
    """So a later change cannot swap a stand-in in unnoticed: vLLM's fingerprint in the answer, its model card's
    owner, its engine core process (vllm/v1/engine/core.py names it `VLLM::EngineCore` with setproctitle)."""
    body = json.dumps({"model": "tiny", "prompt": "Say hello", "max_tokens": 4, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    request = urllib.request.Request(f"{engine.url}/v1/completions", body, {"Content-Type": "application/json"})
    events = urllib.request.urlopen(request, timeout=60).read().decode().split("\n\n")
    last = json.loads(next(e for e in reversed(events) if e.startswith("data: {"))[6:])
    assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", last["system_fingerprint"]), last
    card = json.load(urllib.request.urlopen(f"{engine.url}/v1/models", timeout=10))["data"][0]
    assert (card["id"], card["owned_by"], card["max_model_len"]) == ("tiny", "vllm", 512)
    assert "VLLM::EngineCor" in [name for _, name in children(engine.process.pid)]  # comm holds 15 characters


def bench(capsys, url: str, *argv: str) -> dict:
    capsys.readouterr()
    code = main(["bench", "static", url, "--prompt-tokens", "64", "--output-tokens", "16", "--parallel-num", "8",
                 "--output", "json", *argv])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(out)


def test_bench_counts_every_token_the_engine_streamed_at_parallel_8(engine, capsys):
    """Some of bench's prompts make the tiny model generate only special tokens, each streamed with text "";
    the engine finishes them (finish_reason length) and bench counted them failed, 'stream ended without any
    content' (5 of 40 on main)."""
    before = metric(engine.url, "vllm:request_success_total", finished_reason="length")
    doc = bench(capsys, engine.url)
    run = doc["runs"][0]
    assert (run["requests"], run["failed"], run["errors"]) == (40, 0, {})
    assert metric(engine.url, "vllm:request_success_total", finished_reason="length") - before == 40


def test_bench_chat_against_a_reasoning_model_counts_its_thinking(engine, capsys):
    """With vLLM's reasoning parser every token streams in `delta.reasoning`, none in `delta.content`: main
    counted all 40 failed; TTFT is taken at the first thinking token."""
    doc = bench(capsys, engine.url, "--endpoint", "chat")
    run = doc["runs"][0]
    assert (run["requests"], run["failed"], run["errors"]) == (40, 0, {})
    assert run["total_output_tokens"] == 40 * 16  # the engine's usage: every thinking token counted
