"""Get the package's bytes: a local file, or an s3:// / obs:// object with the weights' credentials (boto3)."""

from __future__ import annotations

import os
from pathlib import Path

from deployctl.errors import DeployctlError, UsageError
from deployctl.spec.model import Spec

_URL_SCHEMES = ("s3://", "obs://")


def missing_local_package(spec: Spec) -> Path | None:
    """The resolved local image.build.packages path when it is not a file here; None for a URL or a present file."""
    build = spec.image.build
    if build is None or build.packages.startswith(_URL_SCHEMES):
        return None
    path = Path(os.path.expanduser(build.packages))
    return None if path.is_file() else path


def require_local_package(spec: Spec) -> None:
    """Refuse before any host is touched when the local package is missing (exit 2)."""
    missing = missing_local_package(spec)
    if missing is not None:
        raise UsageError(f"image.build.packages: {missing}: no such file",
                         hint="point it at the AscendCloud-<ver>-<timestamp>.zip (relative to the spec file)")


def package_bytes(spec: Spec, location: str) -> bytes:
    if location.startswith(_URL_SCHEMES):
        return _object_bytes(spec, location)
    path = Path(os.path.expanduser(location))
    if not path.is_file():
        raise UsageError(f"image.build.packages: {path}: no such file",
                         hint="point it at the AscendCloud-<ver>-<timestamp>.zip (relative to the spec file)")
    return path.read_bytes()


def _object_bytes(spec: Spec, url: str) -> bytes:
    import boto3
    import botocore.exceptions

    bucket, _, key = url.split("://", 1)[1].partition("/")
    credentials = spec.weights.credentials or "env"
    session = boto3.session.Session(profile_name=credentials.split(":", 1)[1]) \
        if credentials.startswith("profile:") else boto3.session.Session()
    client = session.client("s3", endpoint_url=spec.weights.endpoint or os.environ.get("AWS_ENDPOINT_URL"))
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise DeployctlError(f"image.build.packages: cannot fetch {url}: {exc}",
                             hint="the package is fetched with the weights' endpoint and credentials") from None
