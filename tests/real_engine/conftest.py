"""The real vLLM engine (tests/testbed/real_engine.py) serving the tiny model, one per run, on loopback.

Its tests carry the `real_engine` marker and run only when asked (`-m real_engine`: tests/conftest.py deselects
them otherwise, since the engine takes ~80 s to start on 2 cores). Without the engine's venv they skip with the
reason, except under CI=true, where the venv is built (.ci/run's stage builds it first)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import threading

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
              strategy: str | None = None, server_version: str | None = None, extra: str = "",
              eager: bool = True, host: str = HOST, hosts_used: tuple = ()) -> str:
    """A GPU spec deploying the real engine image on `host` (tb1): one instance per port (GPU i for the i-th),
    optionally behind the real vllm-router, with a rollout strategy; `eager=False` lets vLLM compile its graphs;
    `hosts_used`: the hosts the spec lists (default: `host` alone)."""
    from tests.testbed import router_image

    instances = "".join(f"    - {{host: {host}, devices: [{i}], port: {port}}}\n" for i, port in enumerate(ports))
    front = (f"  front: {{kind: vllm-router, host: {host}, port: {front_port}, image: '{router_image.IMAGE}', "
             "policy: round_robin}\n") if front_port else ""
    head = (
        "platform: gpu\nserver: vllm\n"
        + (f"server_version: '{server_version}'\n" if server_version else "")
        + "requirements: {driver: '550.54.15', cards: 2, gpu_memory_gb: 80, ip_forward: true, free_disk_gb: 1}\n"
        f"image: {{name: '{real_engine.IMAGE}'}}\n"
        f"weights: {{source: 's3://{bed.s3.bucket}/{MODEL_PREFIX}', endpoint: '{bed.s3.endpoint}', "
        "dest: /srv/weights/tiny-llama}\n"
        # float32: vLLM's CPU backend on a machine without AVX512-BF16; 512 tokens: a 2-core host.
        # --enforce-eager: no graph compiled (torch inductor, ~20 s on 2 cores per start); test_up.py compiles
        f"model: {{served_name: tiny, max_model_len: 512, max_num_seqs: {max_num_seqs}, "
        "max_num_batched_tokens: 512,\n        extra_args: ['--dtype', 'float32'"
        + (", '--enforce-eager'" if eager else "") + "]}\n"
        # vllm/envs.py: the CPU KV cache in GiB (default 4), and no OpenMP thread pinning on a shared machine.
        # OMP_NUM_THREADS=1: one compute thread, so the bed's sshd and dockerd keep a core of this 2-core machine
        # under load (CI saw sshd miss paramiko's 10 s banner wait while 6 clients saturated a 2-thread engine);
        # vLLM reserves cores for its own non-compute processes likewise (vllm/utils/ompmultiprocessing.py
        # reserve_cpu_num, VLLM_CPU_NUM_OF_RESERVED_CPU), but only when it binds threads, which `nobind` skips
        "env: {VLLM_CPU_KVCACHE_SPACE: '1', VLLM_CPU_OMP_THREADS_BIND: nobind, OMP_NUM_THREADS: '1'}\n"
        + (f"rollout: {{strategy: {strategy}}}\n" if strategy else "") + extra
    )
    topology = f"topology:\n  mode: mixed\n{front}  instances:\n{instances}"
    return bed.spec_yaml(name, topology, hosts_used=list(hosts_used or (host,)), extra=head)


# -- what the tests do to a running engine ---------------------------------------------------------------------
class Saturating:
    """`clients` threads, each sending one long streamed completion after another to the engine until stopped:
    more requests than its max_num_seqs, so some always wait."""

    def __init__(self, clients: int, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.answered, self.errors = 0, []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _client(self) -> None:
        body = json.dumps({"model": "tiny", "prompt": "hello " * 16, "max_tokens": 200, "temperature": 0,
                           "ignore_eos": True})
        while not self.stop.is_set():
            connection = http.client.HTTPConnection("10.200.0.11", self.port, timeout=120)
            try:
                connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                if response.status == 200:
                    self.answered += 1
                else:
                    self.errors.append(response.status)
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(repr(error))
            finally:
                connection.close()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(150)


def stop_engine_core(bed, container: str, sig: str = "STOP") -> str:
    """SIGSTOP (or `sig`: CONT resumes it) the container's VLLM::EngineCore process (vllm/v1/engine/core.py names
    it with setproctitle); its pids. From this process, by the pids `docker top` gives (the bed's hosts share this
    machine's pid namespace): a `docker exec` would run in the container's cgroup, slow while it is throttled."""
    top = bed.docker_on(HOST, "top", container, "-eo", "pid,comm").stdout.splitlines()[1:]
    pids = [int(pid) for pid, comm in (line.split(None, 1) for line in top) if comm.strip() == "VLLM::EngineCor"]
    for pid in pids:
        os.kill(pid, getattr(signal, f"SIG{sig}"))
    return " ".join(map(str, pids))


@contextlib.contextmanager
def throttled(bed, container: str, cpus: float = 0.05):
    """The container held to `cpus` of a core (`docker update --cpus`, a CFS quota on its cgroup): the engine then
    takes seconds per token, so a test can stop it mid-generation without racing it; full speed again after."""
    bed.docker_on(HOST, "update", "--cpus", str(cpus), container)
    try:
        yield
    finally:
        # docker refuses more than the machine's CPUs; as many as it has is no limit
        bed.docker_on(HOST, "update", "--cpus", str(os.cpu_count()), container)
