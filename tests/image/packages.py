"""Synthetic AscendCloud packages in the vendor's nested layout (outer zip -> LLM + OPP zips)."""

from __future__ import annotations

import io
import stat
import zipfile

DOCKERFILE = (b"ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY marker.txt /opt/ascend_vllm/marker.txt\n"
              b"LABEL vendor.recipe=ascend_vllm\n")


def zip_of(members: dict, links: dict | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def llm_zip(marker: bytes = b"one\n", dockerfile: bytes | None = DOCKERFILE, extra: dict | None = None,
            links: dict | None = None) -> bytes:
    members = {"llm_inference/ascend_vllm/marker.txt": marker,
               "llm_inference/ascend_vllm/build_image.sh": b"#!/bin/sh\ndocker build .\n",
               "llm_inference/README.md": b"vendor readme\n", **(extra or {})}
    if dockerfile is not None:
        members["llm_inference/ascend_vllm/Dockerfile"] = dockerfile
    return zip_of(members, links)


def package(version: str = "6.3.909", *, opp_version: str | None = None, llm: bytes | None = None,
            include: tuple = ("LLM", "OPP"), outer_extra: dict | None = None) -> bytes:
    members = {}
    if "LLM" in include:
        members[f"AscendCloud-LLM-{version}-xxx-20241010.zip"] = llm if llm is not None else llm_zip()
    if "OPP" in include:
        members[f"AscendCloud-OPP-{opp_version or version}-xxx-20241010.zip"] = zip_of({"opp/op.so": b"\x7fELF"})
    members["AscendCloud-AIGC-6.3.909-xxx.zip"] = zip_of({"aigc/readme": b"ignored"})
    members.update(outer_extra or {})
    return zip_of(members)


def package_name(version: str = "6.3.909") -> str:
    return f"AscendCloud-{version}-20241010153012.zip"
