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


def need_venv() -> None:
    """The engine's venv, built first under CI=true (.ci/run's stage) or DEPLOYCTL_REAL_ENGINE_BUILD=1; without it
    the test skips with the reason."""
    if os.environ.get("CI", "").lower() == "true":
        real_engine.ensure_venv()
    reason = real_engine.build_if_asked()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    need_venv()
    model = real_model.ensure_model(real_engine.venv_python())
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    started = real_engine.start(model, free_port(), log, extra=REASONING)
    try:
        yield started
    finally:
        started.stop()


# -- deployctl deploying the real engine on the test bed --------------------------------------------------------
HOST = real_engine.HOST
MODEL_PREFIX = real_engine.MODEL_PREFIX


@pytest.fixture(scope="session")
def real_bed(testbed):
    """The bed with tb1 as a 2-GPU host holding the real-engine image, and the tiny model on the bed's S3."""
    need_venv()
    with real_engine.prepared_bed(testbed, HOST):
        yield testbed


@pytest.fixture
def deployctl(capsys, tmp_path, monkeypatch, real_bed):
    from tests.e2e.conftest import Deployctl

    for key, value in real_bed.s3.env().items():  # the S3 credentials, as a user exports them
        monkeypatch.setenv(key, value)
    return Deployctl(capsys, tmp_path)


def real_spec(bed, name: str, ports: tuple, *, max_num_seqs: int = 8, front_port: int | None = None,
              strategy: str | None = None, server_version: str | None = None, extra: str = "") -> str:
    """A GPU spec deploying the real engine image on tb1: one instance per port (GPU i for the i-th), optionally
    behind the real vllm-router, with a rollout strategy."""
    from tests.testbed import router_image

    instances = "".join(f"    - {{host: {HOST}, devices: [{i}], port: {port}}}\n" for i, port in enumerate(ports))
    front = (f"  front: {{kind: vllm-router, host: {HOST}, port: {front_port}, image: '{router_image.IMAGE}', "
             "policy: round_robin}\n") if front_port else ""
    head = (
        "platform: gpu\nserver: vllm\n"
        + (f"server_version: '{server_version}'\n" if server_version else "")
        + "requirements: {driver: '550.54.15', cards: 2, gpu_memory_gb: 80, ip_forward: true, free_disk_gb: 1}\n"
        f"image: {{name: '{real_engine.IMAGE}'}}\n"
        f"weights: {{source: 's3://{bed.s3.bucket}/{MODEL_PREFIX}', endpoint: '{bed.s3.endpoint}', "
        "dest: /srv/weights/tiny-llama}\n"
        # float32: vLLM's CPU backend on a machine without AVX512-BF16; 512 tokens: a 2-core host.
        # --enforce-eager: vLLM's CPU build compiles its graphs with torch inductor, which needs a C++ compiler
        # (torch/_inductor/cpp_builder.py cpp_compiler_search); the bed's image has none
        f"model: {{served_name: tiny, max_model_len: 512, max_num_seqs: {max_num_seqs}, "
        "max_num_batched_tokens: 512,\n        extra_args: ['--dtype', 'float32', '--enforce-eager']}\n"
        # vllm/envs.py: the CPU KV cache in GiB (default 4), and no OpenMP thread pinning on a shared machine.
        # OMP_NUM_THREADS=1: one compute thread, so the bed's sshd and dockerd keep a core of this 2-core machine
        # under load (CI saw sshd miss paramiko's 10 s banner wait while 6 clients saturated a 2-thread engine);
        # vLLM reserves cores for its own non-compute processes likewise (vllm/utils/ompmultiprocessing.py
        # reserve_cpu_num, VLLM_CPU_NUM_OF_RESERVED_CPU), but only when it binds threads, which `nobind` skips
        "env: {VLLM_CPU_KVCACHE_SPACE: '1', VLLM_CPU_OMP_THREADS_BIND: nobind, OMP_NUM_THREADS: '1'}\n"
        + (f"rollout: {{strategy: {strategy}}}\n" if strategy else "") + extra
    )
    topology = f"topology:\n  mode: mixed\n{front}  instances:\n{instances}"
    return bed.spec_yaml(name, topology, hosts_used=[HOST], extra=head)
