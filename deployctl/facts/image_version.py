"""The vLLM version an image was built with, read from its history without running it (pure parser).

vllm-ascend's Dockerfiles install vLLM from `ARG VLLM_TAG=v0.23.0` (v0.23.0:Dockerfile.a3:44), and the builder
records the build arguments a RUN step used in that step's history line (`RUN |3 ... VLLM_TAG=v0.23.0 ...`).
vllm-ascend numbers its releases after the vLLM they pair with (docs/source/community/versioning_policy.md), so
the tag names the release line; `docker history` reads the image's metadata only, once per gather."""

from __future__ import annotations

import re
from typing import Optional

from deployctl.facts.probe import Probe

_VLLM_TAG = re.compile(r"\bVLLM_TAG=(v?\d+\.\d+(?:\.\d+)?(?:(?:rc|\.post)\d+)?)\b")
# vllm-ascend's own version, where an image records it (a build argument or env of a derived image)
_ASCEND = re.compile(r"\bVLLM_ASCEND_VERSION=(v?\d+\.\d+(?:\.\d+)?(?:(?:rc|\.post)\d+)?)\b")


def parse_image_version(text: str) -> Optional[str]:
    """The version the image's history names: vllm-ascend's own if recorded, else the vLLM it installed; None."""
    for pattern in (_ASCEND, _VLLM_TAG):
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def image_version_probe(image: str) -> Probe:
    return Probe(("docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image), parse_image_version,
                 "image_version")
