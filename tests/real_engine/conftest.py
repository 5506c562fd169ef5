"""The real vLLM engine (tests/testbed/real_engine.py) serving the tiny model, one per run, on loopback.

Its tests carry the `real_engine` marker and run only when asked (`-m real_engine`: tests/conftest.py deselects
them otherwise, since the engine takes ~80 s to start on 2 cores). Without the engine's venv they skip with the
reason, except under CI=true, where the venv is built (.ci/run's stage builds it first)."""

from __future__ import annotations

import os

import pytest

from tests.e2e.conftest import pytest_runtest_makereport  # noqa: F401  (a failed test shows deployctl's words)
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


# -- deployctl deploying the real engine on the test bed --------------------------------------------------------
HOST = "tb1"  # a GPU host for these tests: `server: vllm` on platform gpu, as a user deploys vLLM
MODEL_PREFIX = "tiny-llama/"


@pytest.fixture(scope="session")
def real_bed(testbed):
    """The bed with tb1 as a 2-GPU host holding the real-engine image, and the tiny model on the bed's S3 (what
    `up` syncs to the host, as a user's weights come from S3/OBS)."""
    if os.environ.get("CI", "").lower() == "true":
        real_engine.ensure_venv()
    reason = real_engine.build_if_asked()
    if reason:
        pytest.skip(reason)
    model = real_model.ensure_model(real_engine.venv_python())
    testbed.set_gpu_profile(HOST, gpus=2)
    try:
        real_engine.ensure_image([testbed.host(HOST).docker_socket])
        client = testbed.s3.client()
        for path in sorted(model.iterdir()):
            client.put_object(Bucket=testbed.s3.bucket, Key=MODEL_PREFIX + path.name, Body=path.read_bytes())
        yield testbed
    finally:
        testbed.reset_gpu(HOST)


@pytest.fixture
def deployctl(capsys, tmp_path, monkeypatch, real_bed):
    from tests.e2e.conftest import Deployctl

    for key, value in real_bed.s3.env().items():  # the S3 credentials, as a user exports them
        monkeypatch.setenv(key, value)
    return Deployctl(capsys, tmp_path)
