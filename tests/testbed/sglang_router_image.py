"""The test bed's SGLang router image: the real `sglang-router` wheel (0.3.2, the SGLang Model Gateway: a Rust
binary in a Python wheel) and its dependencies from PyPI, installed once for the base image's python3 into the
bed's cache, on top of the base, as router_image.py builds vllm-router's (a fork of it). Specs on the bed name it
as `topology.front.image` (kind sglang-router): deployctl runs `python3 -m sglang_router.launch_router` in it."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Optional

from tests.testbed import layout
from tests.testbed.router_image import install_site, site_context

VERSION = "0.3.2"
IMAGE = f"deployctl/testbed-sglang-router:{VERSION}"
RECIPE = "testbed-sglang-router/1"  # bump when the image's layout below changes
DOCKERFILE = f"""ARG BASE_IMAGE={layout.BASE_IMAGE}
FROM ${{BASE_IMAGE}}
COPY site/ /opt/sglang-router/
COPY lib/ /usr/lib/x86_64-linux-gnu/
ENV PYTHONPATH=/opt/sglang-router PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT ["python3", "-m", "sglang_router.launch_router"]
"""


def site_dir() -> Path:
    return layout.cache_dir() / f"sglang-router-{VERSION}-py{sys.version_info.major}{sys.version_info.minor}"


def ensure_site() -> Optional[Path]:
    return install_site(site_dir(), f"sglang-router=={VERSION}", Path("sglang_router") / "launch_router.py")


def content_hash(base: str) -> Optional[str]:
    """The image's content label: the base's, the recipe and the router's version; None without the wheel."""
    if ensure_site() is None:
        return None
    return hashlib.sha256(f"{base}\0{RECIPE}\0{VERSION}\0{DOCKERFILE}".encode()).hexdigest()[:16]


def build(socket: Path, content: str, base_libraries: list) -> None:
    from tests.testbed.images import docker

    docker(socket, "build", "-q", "--label", f"{layout.HASH_LABEL}={content}", "-t", IMAGE, "-",
           input=site_context(ensure_site(), DOCKERFILE, {}, base_libraries))
