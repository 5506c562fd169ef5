"""Where the weights come from: `s3://` / `obs://` bucket and prefix, or a local directory (pure parsing)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from deployctl.errors import UsageError


@dataclass(frozen=True)
class Source:
    kind: str  # "s3" (also for obs://) | "local"
    text: str  # as the spec wrote it
    bucket: str = ""
    prefix: str = ""  # "" or ends with "/"
    path: str = ""  # the local directory

    @property
    def remote(self) -> bool:
        return self.kind == "s3"


def parse_source(text: Optional[str]) -> Source:
    if not text:
        raise UsageError("weights.source is not set", hint="set weights.source: s3://bucket/prefix/ (or obs://, or a directory)")
    match = re.match(r"^(s3|obs)://([^/]+)/?(.*)$", text)
    if match:
        prefix = match.group(3)
        if prefix and not prefix.endswith("/"):
            prefix += "/"  # a model is a folder: `s3://b/model` means everything under `model/`
        return Source("s3", text, bucket=match.group(2), prefix=prefix)
    if "://" in text:
        raise UsageError(f"weights.source: {text!r} is not s3://, obs:// or a local directory")
    return Source("local", text, path=text)


def addressing_style(endpoint: Optional[str]) -> str:
    """Path-style for IP, localhost and ported endpoints (MinIO, SeaweedFS); virtual-hosted for AWS and OBS."""
    if not endpoint:
        return "virtual"
    host = urlsplit(endpoint).hostname or ""
    if "myhuaweicloud.com" in host or "amazonaws.com" in host:
        return "virtual"
    return "path"


def region_of(endpoint: Optional[str], configured: Optional[str]) -> str:
    """The signing region: configured (AWS_REGION), else OBS's `obs.<region>.myhuaweicloud.com`, else us-east-1."""
    if configured:
        return configured
    host = urlsplit(endpoint or "").hostname or ""
    match = re.match(r"^obs\.([a-z0-9-]+)\.myhuaweicloud\.com$", host)
    if match:
        return match.group(1)
    match = re.match(r"^s3[.-]([a-z0-9-]+)\.amazonaws\.com$", host)
    return match.group(1) if match and match.group(1) != "external-1" else "us-east-1"


def relative_path(key: str, prefix: str) -> Optional[str]:
    """The file's path under dest for an object key; None for folder markers and unsafe names."""
    rest = key[len(prefix):] if key.startswith(prefix) else None
    if not rest or rest.endswith("/"):
        return None
    parts = rest.split("/")
    if any(p in ("", ".", "..") for p in parts) or rest.endswith(".deployctl-partial"):
        return None
    return rest
