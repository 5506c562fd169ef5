"""The version an image names in its history (`docker history`): vllm-ascend's own where recorded, else the vLLM
its Dockerfile installed (ARG VLLM_TAG), which names the vllm-ascend line."""

from __future__ import annotations

from deployctl.facts.image_version import image_version_probe, parse_image_version
from deployctl.spec.profiles import select_profile

HISTORY = """CMD ["/bin/bash"]
RUN /bin/sh -c echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/lib" >> ~/.bashrc # buildkit
RUN |5 PIP_INDEX_URL=https://mirrors.tuna.tsinghua.edu.cn/pypi/web/simple MOONCAKE_TAG=0.3.11.post1 VLLM_REPO=https://github.com/vllm-project/vllm.git VLLM_TAG=v0.23.0 VLLM_COMMIT= /bin/sh -c VLLM_TARGET_DEVICE="empty" python3 -m pip install -e /vllm-workspace/vllm/[audio] # buildkit
ARG VLLM_TAG=v0.23.0
FROM quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12
"""


def test_the_vllm_tag_in_the_history_names_the_line():
    assert parse_image_version(HISTORY) == "v0.23.0"
    assert select_profile(None, "registry/vllm-ascend:latest", probed=parse_image_version(HISTORY)).describe() \
        .endswith("probed in the image: v0.23.0")
    assert parse_image_version("ENV VLLM_ASCEND_VERSION=0.13.0rc1\n" + HISTORY) == "0.13.0rc1"
    assert parse_image_version('CMD ["python3"]\nCOPY vllm/ /opt/standin/vllm/\n') is None


def test_the_probe_reads_metadata_only():
    probe = image_version_probe("quay.io/ascend/vllm-ascend:v0.23.0-a3")
    assert probe.argv[:2] == ("docker", "history") and probe.key == "image_version"
