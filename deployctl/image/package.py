"""The AscendCloud package: outer zip -> LLM + OPP zips -> `llm_inference/ascend_vllm/`, checked before any build.

Everything is read in memory from the zip files; nothing is extracted, so a hostile member cannot land anywhere.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
import zipfile
from dataclasses import dataclass
from typing import Mapping

from deployctl.errors import UsageError

RECIPE_DIR = "llm_inference/ascend_vllm/"
_OUTER = re.compile(r"AscendCloud-(?P<ver>\d+(?:\.\d+)+)-(?P<stamp>[^/]+)\.zip")
_INNER = re.compile(r"AscendCloud-(?P<kind>LLM|OPP)-(?P<ver>\d+(?:\.\d+)+)(?:-[^/]*)?\.zip")


class PackageError(UsageError):
    """The package is not what the build needs: exit 2, nothing built."""


@dataclass(frozen=True)
class Package:
    """What the build takes from the package: version, the inner zips' digests, the vendor recipe's files."""

    version: str
    llm_name: str
    opp_name: str
    llm_sha256: str
    opp_sha256: str
    recipe: Mapping[str, bytes]  # paths relative to ascend_vllm/ -> content
    llm_zip: bytes
    opp_zip: bytes


def unsafe_member(info: zipfile.ZipInfo) -> str | None:
    """Why a member would land outside its folder (`../`, absolute path, link), or None."""
    name = info.filename.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if ".." in name.split("/"):
        return "a `../` path"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link"
    return None


def _open_zip(data: bytes, label: str) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise PackageError(f"{label}: not a zip file") from None
    for info in archive.infolist():
        why = unsafe_member(info)
        if why:
            raise PackageError(f"{label}: member {info.filename!r} is {why}: it would land outside its folder",
                               hint="refusing the package; get an unmodified one from the vendor")
    return archive


def _inner_zips(outer: zipfile.ZipFile, label: str) -> dict[str, tuple[str, str]]:
    """{'LLM': (member, version), 'OPP': (member, version)}; other zips beside them are ignored."""
    found: dict[str, tuple[str, str]] = {}
    for name in outer.namelist():
        match = _INNER.fullmatch(name.rsplit("/", 1)[-1])
        if match:
            if match["kind"] in found:
                raise PackageError(f"{label}: two AscendCloud-{match['kind']} zips: {found[match['kind']][0]}, {name}")
            found[match["kind"]] = (name, match["ver"])
    for kind in ("LLM", "OPP"):
        if kind not in found:
            raise PackageError(f"{label}: no AscendCloud-{kind}-<version>-*.zip inside",
                               hint="the outer AscendCloud-<ver>-<timestamp>.zip holds the LLM and OPP zips")
    return found


def read_package(data: bytes, label: str) -> Package:
    """Check the outer zip's bytes and return what the build needs; any problem is a PackageError."""
    outer_match = _OUTER.fullmatch(label.replace("\\", "/").rsplit("/", 1)[-1])
    outer = _open_zip(data, label)
    inner = _inner_zips(outer, label)
    versions = {kind: ver for kind, (_, ver) in inner.items()}
    if versions["LLM"] != versions["OPP"]:
        raise PackageError(f"{label}: versions differ: {inner['LLM'][0]} is {versions['LLM']}, "
                           f"{inner['OPP'][0]} is {versions['OPP']}")
    if outer_match and outer_match["ver"] != versions["LLM"]:
        raise PackageError(f"{label}: the package is {outer_match['ver']} but its zips are {versions['LLM']}")
    llm_bytes, opp_bytes = outer.read(inner["LLM"][0]), outer.read(inner["OPP"][0])
    llm = _open_zip(llm_bytes, f"{label}!{inner['LLM'][0]}")
    _open_zip(opp_bytes, f"{label}!{inner['OPP'][0]}")
    recipe = recipe_files(llm)
    if "Dockerfile" not in recipe:
        raise PackageError(f"{label}!{inner['LLM'][0]}: no {RECIPE_DIR}Dockerfile")
    return Package(
        version=versions["LLM"],
        llm_name=inner["LLM"][0].rsplit("/", 1)[-1],
        opp_name=inner["OPP"][0].rsplit("/", 1)[-1],
        llm_sha256=hashlib.sha256(llm_bytes).hexdigest(),
        opp_sha256=hashlib.sha256(opp_bytes).hexdigest(),
        recipe=recipe,
        llm_zip=llm_bytes,
        opp_zip=opp_bytes,
    )


def recipe_files(llm: zipfile.ZipFile) -> dict[str, bytes]:
    """The files under `llm_inference/ascend_vllm/` (at any leading folder), relative to it."""
    files = {}
    for info in llm.infolist():
        name = info.filename.replace("\\", "/")
        at = name.find(RECIPE_DIR)
        if at < 0 or info.is_dir() or (at and not name[:at].endswith("/")):
            continue
        files[name[at + len(RECIPE_DIR):]] = llm.read(info)
    return files
