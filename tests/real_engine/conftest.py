"""The real vLLM engine (tests/testbed/real_engine.py) serving the tiny model, one per run, on loopback.

Its tests carry the `real_engine` marker and run only when asked (`-m real_engine`: tests/conftest.py deselects
them otherwise, since the engine takes ~80 s to start on 2 cores). Without the engine's venv they skip with the
reason, except under CI=true, where the venv is built (.ci/run's stage builds it first)."""

from __future__ import annotations

import os

import pytest

from tests.ports import free_port
from tests.testbed import real_engine, real_model

# vLLM's own DeepSeek-R1 parser (vllm/reasoning/deepseek_r1_reasoning_parser.py): the tiny model's chat template
# opens a thinking it never closes, so every chat token streams as `delta.reasoning`.
REASONING = ("--reasoning-parser", "deepseek_r1")


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    if not real_engine.ready():
        if os.environ.get("CI", "").lower() == "true":
            real_engine.ensure_venv()
        else:
            reason = real_engine.build_if_asked()
            if reason:
                pytest.skip(reason)
    model = real_model.ensure_model(real_engine.venv_python())
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    started = real_engine.start(model, free_port(), log, extra=REASONING)
    try:
        yield started
    finally:
        started.stop()
