"""The test bed's vLLM router image: the real `vllm-router` wheel (vllm-project/router on PyPI) and its
dependencies from PyPI, installed once for the base image's python3 into the bed's cache, on top of the base.
Specs on the bed name it as `topology.front.image` (kind vllm-router): the mixed front on the bed is the real
router, not an emulation."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Optional

from tests.testbed import layout

VERSION = "0.1.17"
IMAGE = f"deployctl/testbed-router:{VERSION}"
RECIPE = "testbed-router/1"  # bump when the image's layout below changes
# The wheel's console script (entry_points.txt: vllm-router = vllm_router.launch_router:main).
LAUNCHER = ('#!/bin/sh\nexec python3 -c "import sys; sys.argv[0] = \'vllm-router\'; '
            'from vllm_router.launch_router import main; main()" "$@"\n')
DOCKERFILE = f"""ARG BASE_IMAGE={layout.BASE_IMAGE}
FROM ${{BASE_IMAGE}}
COPY site/ /opt/vllm-router/
COPY lib/ /usr/lib/x86_64-linux-gnu/
COPY vllm-router /usr/local/bin/vllm-router
ENV PYTHONPATH=/opt/vllm-router PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT ["vllm-router"]
"""


def site_dir() -> Path:
    return layout.cache_dir() / f"vllm-router-{VERSION}-py{sys.version_info.major}{sys.version_info.minor}"


def ensure_site() -> Optional[Path]:
    """The router and its dependencies installed for this python (`pip install --target`, once, kept in the bed's
    cache); None when PyPI cannot be reached (the bed goes on without the router image, and says so)."""
    return install_site(site_dir(), f"vllm-router=={VERSION}", Path("vllm_router") / "launch_router.py")


def install_site(site: Path, requirement: str, marker: Path) -> Optional[Path]:
    """`requirement` and its dependencies installed into `site` for this python (once: `marker` inside says it is
    there); None when the registry cannot give them (said on stderr)."""
    if (site / marker).exists():
        return site
    site.parent.mkdir(parents=True, exist_ok=True)
    tmp = site.parent / f"{site.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                             "--target", str(tmp), "--only-binary=:all:", requirement],
                            capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"testbed: no image of {requirement} (pip install failed: "
              f"{(result.stderr or result.stdout).strip().splitlines()[-1:]})", file=sys.stderr)
        return None
    try:
        os.rename(tmp, site)
    except OSError:  # another bed installed it first
        shutil.rmtree(tmp, ignore_errors=True)
    return site


def content_hash(base: str) -> Optional[str]:
    """The image's content label: the base's, the recipe and the router's version; None without the wheel."""
    if ensure_site() is None:
        return None
    return hashlib.sha256(f"{base}\0{RECIPE}\0{VERSION}\0{DOCKERFILE}\0{LAUNCHER}".encode()).hexdigest()[:16]


def shared_libraries(site: Path, base_libraries: list, extra: tuple = ()) -> list[Path]:
    """Host libraries the shared objects under `site` (and the `extra` programs) load that the base image lacks
    (libstdc++, libgcc_s)."""
    objects = [str(p) for p in site.rglob("*.so*") if p.is_file()] + list(extra)
    found = set()
    for start in range(0, len(objects), 200):
        ldd = subprocess.run(["ldd", *objects[start:start + 200]], capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            words = line.split()
            if "=>" in words and len(words) > words.index("=>") + 1:
                path = words[words.index("=>") + 1]
                if path.startswith(("/lib", "/usr/lib")):
                    found.add(path)
    have = {Path(lib).name for lib in base_libraries}
    return sorted(Path(p) for p in found if Path(p).name not in have)


def context(base_libraries: list) -> bytes:
    """The docker build context, as a tar: the Dockerfile, the installed site, the libraries, the launcher."""
    return site_context(ensure_site(), DOCKERFILE, {"vllm-router": LAUNCHER}, base_libraries)


def site_context(site: Path, dockerfile: str, programs: dict, base_libraries: list) -> bytes:
    """A build context of `dockerfile`, the installed `site` (as site/), the host libraries its shared objects need
    that the base lacks (as lib/) and `programs` (name -> script, executable)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def text(name: str, content: str, mode: int = 0o644) -> None:
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        text("Dockerfile", dockerfile)
        for name, script in programs.items():
            text(name, script, 0o755)
        tar.add(str(site), arcname="site", filter=lambda i: None if "__pycache__" in i.name else i)
        info = tarfile.TarInfo("lib")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        for library in shared_libraries(site, base_libraries):
            tar.add(os.path.realpath(library), arcname=f"lib/{library.name}")
    return buffer.getvalue()


def build(socket: Path, content: str, base_libraries: list) -> None:
    from tests.testbed.images import docker

    docker(socket, "build", "-q", "--label", f"{layout.HASH_LABEL}={content}", "-t", IMAGE, "-",
           input=context(base_libraries))
