"""The edge of `deployctl diagnose`: one batch per host (all hosts at once), the answers turned into the bundle
by the pure modules, then one tar.gz written beside the spec. `write_bundle` is also what a failed `up` calls."""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Optional

from deployctl.batch import run_batch
from deployctl.diagnose.bundle import Answer, HostBundle, Summary, all_texts, host_bundle, members, unreachable
from deployctl.diagnose.plan import collection_plan
from deployctl.diagnose.redact import redact_text, secret_values
from deployctl.diagnose.signatures import Hint, match
from deployctl.errors import DeployctlError
from deployctl.fanout import on_hosts
from deployctl.spec.model import Spec
from deployctl.transport import Transport

BATCH_TIMEOUT = 180.0


@dataclass(frozen=True)
class BundleResult:
    path: Path
    summary: Summary

    @property
    def hints(self) -> tuple[Hint, ...]:
        return self.summary.hints

    def to_json(self) -> dict:
        document = self.summary.to_json(bundle=str(self.path))
        document.pop("created")
        return document


def collect_host(spec: Spec, transport: Transport, *, lines: int, marker: str, secrets: tuple[str, ...]) -> HostBundle:
    """One round trip: every item of the host's plan in one batch; a lost connection is the host's failure."""
    items = collection_plan(spec, transport.name, lines=lines, marker=marker)
    try:
        results = run_batch(transport, [item.command for item in items], timeout=BATCH_TIMEOUT)
    except DeployctlError as error:
        return unreachable(transport.name, redact_text(error.message, secrets))
    answers = [Answer(r.exit_code, r.stdout, r.stderr) for r in results]
    return host_bundle(transport.name, items, answers, marker=marker, secrets=secrets)


def write_bundle(spec: Spec, transports: Mapping[str, Transport], *, lines: int = 200, out: Optional[Path] = None,
                 unreachable_hosts: Mapping[str, str] = {}, context: Mapping[str, str] = {},
                 environ: Optional[Mapping[str, str]] = None) -> BundleResult:
    """Collect from every host, match the signatures, write the tar.gz (default `.deployctl/<name>/diagnose-<UTC
    time>.tar.gz` beside the spec). `unreachable_hosts`: host -> why it could not be reached (a summary line);
    `context`: extra top-level files (the error a failed `up` ended with)."""
    secrets = secret_values(spec, os.environ if environ is None else environ, _profile_credentials(spec))
    marker = uuid.uuid4().hex[:12]
    collected = on_hosts(transports, lambda t: collect_host(spec, t, lines=lines, marker=marker, secrets=secrets))
    hosts = []
    for host in spec.hosts:  # the spec's order
        if host.name in collected:
            hosts.append(collected[host.name])
        elif host.name in unreachable_hosts:
            hosts.append(unreachable(host.name, redact_text(unreachable_hosts[host.name], secrets)))
    context = {name: redact_text(text, secrets) for name, text in context.items()}
    now = datetime.now(timezone.utc)
    summary = Summary(spec.name, now.isoformat(timespec="seconds"), tuple(hosts),
                      tuple(match(all_texts(hosts, context))), context)
    path = out or _default_path(spec, now)
    _write_archive(path, path.name.removesuffix(".tar.gz"), members(path.name.removesuffix(".tar.gz"), summary), now)
    return BundleResult(path, summary)


def _default_path(spec: Spec, now: datetime) -> Path:
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    path = spec.state_dir / f"diagnose-{stamp}.tar.gz"
    n = 1
    while path.exists():  # two bundles within a second (a failed `up`, then `diagnose`)
        n += 1
        path = spec.state_dir / f"diagnose-{stamp}-{n}.tar.gz"
    return path


def _write_archive(path: Path, root: str, files: Mapping[str, bytes], now: datetime) -> None:
    """Written to a temporary name and renamed: the path holds a whole archive or nothing (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as archive:
            folders = sorted({"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)})
            for folder in folders:
                info = tarfile.TarInfo(folder)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(now.timestamp())
                archive.addfile(info)
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(now.timestamp())
                archive.addfile(info, io.BytesIO(data))
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _profile_credentials(spec: Spec) -> tuple[str, ...]:
    """The keys of a `credentials: profile:<name>` S3 profile, to be redacted too (nothing when unreadable)."""
    credentials = spec.weights.credentials or "env"
    if not credentials.startswith("profile:"):
        return ()
    try:
        import boto3

        found = boto3.Session(profile_name=credentials.split(":", 1)[1]).get_credentials()
        frozen = found.get_frozen_credentials() if found else None
    except Exception:  # no boto3, no such profile: nothing of it can be in the bundle to redact
        return ()
    return tuple(v for v in (frozen.access_key, frozen.secret_key, frozen.token) if v) if frozen else ()
