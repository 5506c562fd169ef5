"""The object store, on the control machine only: list with boto3 and pre-sign GETs (credentials stay here)."""

from __future__ import annotations

import os
from pathlib import Path

from deployctl.errors import DeployctlError, UsageError
from deployctl.spec.model import WeightsSpec
from deployctl.weights.manifest import SourceObject
from deployctl.weights.source import Source, addressing_style, relative_path, region_of

URL_LIFETIME_S = 6 * 3600  # long enough for a large model over a slow link; a URL is a bearer token
# An unreachable endpoint must fail in seconds, not minutes: attempts x connect timeout bounds the wait.
S3_CONNECT_TIMEOUT_S = 5
S3_READ_TIMEOUT_S = 15
S3_ATTEMPTS = 3


class WeightsSourceError(DeployctlError):
    """The source cannot be read: credentials, bucket, prefix or endpoint."""


class MissingCredentials(WeightsSourceError):
    """No credentials to list the source (a fresh shell): `up` may still judge from the hosts' manifests."""


def s3_client(weights: WeightsSpec):
    """A boto3 S3 client for the spec's endpoint and credentials (`env` or `profile:<name>`)."""
    import boto3
    import botocore.exceptions
    from botocore.config import Config

    credentials = weights.credentials or "env"
    try:
        if credentials == "env":
            session = boto3.Session()
        elif credentials.startswith("profile:"):
            session = boto3.Session(profile_name=credentials.split(":", 1)[1])
        else:
            raise UsageError(f"weights.credentials: {credentials!r} is not `env` or `profile:<name>`")
    except botocore.exceptions.ProfileNotFound as exc:
        raise WeightsSourceError(f"weights: {exc}", hint="add the profile to ~/.aws/credentials") from None
    region = region_of(weights.endpoint, os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    config = Config(signature_version="s3v4", s3={"addressing_style": addressing_style(weights.endpoint)},
                    retries={"max_attempts": S3_ATTEMPTS, "mode": "standard"},
                    connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S)
    return session.client("s3", endpoint_url=weights.endpoint or None, region_name=region, config=config)


def list_source(client, source: Source, endpoint: str | None) -> tuple[SourceObject, ...]:
    """Every object under the prefix (folder markers skipped); clear errors for credentials, bucket, prefix."""
    import botocore.exceptions

    where = f"s3://{source.bucket}/{source.prefix}" + (f" at {endpoint}" if endpoint else "")
    objects = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=source.prefix):
            for item in page.get("Contents", []):
                path = relative_path(item["Key"], source.prefix)
                if path is not None:
                    objects.append(SourceObject(item["Key"], path, int(item["Size"]), item["ETag"].strip('"')))
    except botocore.exceptions.NoCredentialsError:
        raise MissingCredentials(f"weights: no credentials to read {where}",
                                 hint="export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (credentials: env), "
                                      "or set weights.credentials: profile:<name>") from None
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            raise WeightsSourceError(f"weights: bucket {source.bucket!r} does not exist ({where})") from None
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
                    "ExpiredToken") or status == 403:
            raise WeightsSourceError(f"weights: the object store refused the credentials ({code or status}) "
                                     f"reading {where}",
                                     hint="check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the profile) "
                                          "and the bucket policy") from None
        raise WeightsSourceError(f"weights: listing {where} failed: {code or status}") from None
    except (botocore.exceptions.ConnectionError, botocore.exceptions.ReadTimeoutError) as exc:
        url = endpoint or client.meta.endpoint_url
        reason = "timed out" if isinstance(exc, (botocore.exceptions.ConnectTimeoutError,
                                                 botocore.exceptions.ReadTimeoutError)) else "cannot connect"
        raise WeightsSourceError(f"weights: cannot reach the S3 endpoint {url} ({reason}, {S3_ATTEMPTS} attempts "
                                 f"of {S3_CONNECT_TIMEOUT_S} s) listing s3://{source.bucket}/{source.prefix}",
                                 hint="check weights.endpoint and the network") from None
    if not objects:
        raise WeightsSourceError(f"weights: no objects under {where}",
                                 hint="check the prefix in weights.source (it names a folder of the bucket)")
    return tuple(sorted(objects, key=lambda o: o.path))


def presign(client, bucket: str, key: str) -> str:
    return client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                         ExpiresIn=URL_LIFETIME_S)


def list_local(source: Source) -> tuple[SourceObject, ...]:
    """A local directory as a source: ETag stands in as size+mtime (cheap, changes when the file does)."""
    root = Path(source.path)
    if not root.is_dir():
        raise WeightsSourceError(f"weights: {root} is not a directory")
    objects = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        stat = path.stat()
        objects.append(SourceObject(relative, relative, stat.st_size, f"local-{stat.st_size:x}-{stat.st_mtime_ns:x}"))
    if not objects:
        raise WeightsSourceError(f"weights: {root} holds no files")
    return tuple(objects)
