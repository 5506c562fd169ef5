"""The image's input hash and its build context: pure functions of bytes."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from deployctl.image.package import Package


def inputs_digest(base_image_id: str, llm_sha256: str, opp_sha256: str, recipe: Mapping[str, bytes]) -> str:
    """sha256 over the base image ID, both zips' contents and the recipe (names and bytes, sorted)."""
    digest = hashlib.sha256()
    for part in ("base", base_image_id, "llm", llm_sha256, "opp", opp_sha256):
        digest.update(part.encode() + b"\0")
    for name in sorted(recipe):
        digest.update(b"recipe\0" + name.encode() + b"\0" + hashlib.sha256(recipe[name]).hexdigest().encode() + b"\0")
    return "sha256:" + digest.hexdigest()


def context_tar(files: Mapping[str, bytes]) -> bytes:
    """A deterministic tar of the build context (fixed mtimes and owners), for `docker build -`."""
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(files[name]))
    return buffer.getvalue()


@dataclass(frozen=True)
class BuildInputs:
    """The package plus the recipe actually built (the vendor's ascend_vllm/ or a folder from images/)."""

    package: Package
    context: Mapping[str, bytes]

    def digest(self, base_id: str) -> str:
        return inputs_digest(base_id, self.package.llm_sha256, self.package.opp_sha256, self.context)
