"""`weights sync`: list the source once (control side), then every host fetches what it lacks, in parallel."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping, Optional

from deployctl.errors import HostError, UsageError
from deployctl.core import Command, Secret
from deployctl.spec.model import Spec
from deployctl.transport import Transport
from deployctl.weights.host_state import read_host_state
from deployctl.weights.manifest import MANIFEST_NAME, HostPlan, HostState, manifest_digest, plan_host
from deployctl.weights.source import Source, parse_source

# 8 connections per host, each on its own file where there are enough files (hashed as the bytes land); 16 MiB
# parts: few requests per GiB for the server, 12 part buffers (192 MiB) at most on the host.
PART_SIZE = 16 << 20
CONCURRENCY = 8


@dataclass(frozen=True)
class HostReport:
    host: str
    files: int
    bytes: int
    transferred_bytes: int
    seconds: float
    manifest_digest: Optional[str]
    planned_bytes: int = 0  # what a --dry-run would download

    def to_json(self) -> dict:
        return {"host": self.host, "files": self.files, "bytes": self.bytes,
                "transferred_bytes": self.transferred_bytes, "seconds": round(self.seconds, 3),
                "manifest_digest": self.manifest_digest}


def weights_hosts(spec: Spec) -> list[str]:
    """Hosts that run instances (the scheduler reads no weights, but it may share a host)."""
    return [h.name for h in spec.used_hosts]


def fetcher_path(spec: Spec) -> str:
    return f"{spec.remote_state_dir}/weights_fetch.py"


@functools.lru_cache(maxsize=1)
def fetcher_program() -> tuple[bytes, str]:
    """The host-side fetcher and its sha256 (read once per process, whatever the number of hosts)."""
    program = resources.files("deployctl.weights").joinpath("weights_fetch.py").read_bytes()
    return program, hashlib.sha256(program).hexdigest()


def build_job(dest: str, source_text: str, plan: HostPlan, urls: Mapping[str, str], listed: str = "") -> dict:
    """The fetcher's stdin (pure): it holds pre-signed URLs, so it only ever travels as a Secret."""
    job = {"dest": dest, "source": source_text, "part_size": PART_SIZE, "concurrency": CONCURRENCY,
           "remove": list(plan.remove),
           "files": [{"key": o.key, "path": o.path, "size": o.size, "etag": o.etag, "url": urls[o.key]}
                     for o in plan.fetch]}
    if listed:
        job["listed"] = listed
    return job


def check_space(host: str, address: Optional[str], dest: str, state: HostState, plan: HostPlan) -> None:
    if plan.bytes_needed > state.free_bytes:
        raise HostError(host, f"not enough space for the weights at {dest}: {plan.bytes_needed} bytes still to "
                              f"download, {state.free_bytes} bytes free on {state.free_path}", address=address,
                        hint=f"free {plan.bytes_needed - state.free_bytes} bytes on {state.free_path}, "
                             "or set weights.dest on a larger filesystem")


def sync_weights(spec: Spec, transports: Mapping[str, Transport], ui, *, dry_run: bool = False) -> list[HostReport]:
    """Bring weights.dest on every instance host in line with the source; returns one report per host."""
    from deployctl.gather import on_hosts
    from deployctl.weights.progress import host_progress
    from deployctl.weights.store import list_local, presign, s3_client

    if not spec.weights.dest:
        raise UsageError("weights.dest is not set", hint="set weights.dest: the model directory on every host")
    source = parse_source(spec.weights.source)
    dest = spec.weights.dest
    hosts = {name: transports[name] for name in weights_hosts(spec)}
    with ThreadPoolExecutor(1) as background:
        # The hosts' state and the source's listing are independent round trips: overlap them.
        pending = background.submit(on_hosts, hosts, lambda t: read_host_state(t, dest, fetcher_path(spec)))
        client = s3_client(spec.weights) if source.remote else None
        objects = _list_announced(client, source, spec, ui) if source.remote else list_local(source)
        listed = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        states = pending.result()
    total = sum(o.size for o in objects)
    plans = {name: plan_host(objects, state) for name, state in states.items()}
    for name, plan in plans.items():
        check_space(name, getattr(hosts[name], "address", None), dest, states[name], plan)
    if dry_run:
        return [HostReport(name, len(objects), total, 0, 0.0, manifest_digest(states[name].manifest),
                           planned_bytes=plans[name].bytes_needed) for name in hosts]
    urls = {}
    if source.remote:
        keys = sorted({o.key for plan in plans.values() for o in plan.fetch})
        urls = {key: presign(client, source.bucket, key) for key in keys}
    busy = [name for name, plan in plans.items() if not plan.idle]
    if busy and not ui.quiet:
        ui.info(f"weights: {source.text} -> {dest} on {', '.join(busy)}")

    with host_progress(ui, busy) as for_host:
        def one(transport: Transport) -> HostReport:
            started = time.monotonic()
            plan, state = plans[transport.name], states[transport.name]
            if plan.idle:
                files = state.manifest
                transferred = 0
            elif source.remote:
                files, transferred = _fetch_remote(spec, transport, dest, source, plan, state, urls,
                                                   for_host(transport.name), listed)
            else:
                files, transferred = _push_local(transport, dest, source, plan, state, listed)
            return HostReport(transport.name, len(files), sum(int(e["size"]) for e in files.values()), transferred,
                              time.monotonic() - started, manifest_digest(files))

        reports = on_hosts(hosts, one)
    return [reports[name] for name in hosts]


def _list_announced(client, source: Source, spec: Spec, ui):
    """The source's listing; when the endpoint is slow to answer, say which one is being waited for."""
    import threading

    from deployctl.weights.store import list_source

    notice = threading.Timer(1.0, ui.info, (f"weights: contacting S3 endpoint {client.meta.endpoint_url} "
                                           f"(listing {source.text})…",))
    notice.daemon = True
    notice.start()
    try:
        return list_source(client, source, spec.weights.endpoint)
    finally:
        notice.cancel()


def _fetch_remote(spec, transport, dest, source: Source, plan: HostPlan, state: HostState, urls, on_line,
                  listed: str = ""):
    program, digest = fetcher_program()
    if state.fetcher_digest != digest:
        transport.put(fetcher_path(spec), program, mode=0o644)
    job = build_job(dest, source.text, plan, urls, listed)
    command = Command(("python3", fetcher_path(spec)), stdin=Secret(json.dumps(job), "weights job (pre-signed URLs)"))
    runner = getattr(transport, "run_streaming", None)
    result = runner(command, on_line, timeout=None) if runner else transport.run(command)
    address = getattr(transport, "address", None)
    try:
        outcome = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("P "))
        raise HostError(transport.name, f"weights fetch into {dest} stopped (exit {result.exit_code}); "
                                        "partial files stay and the next sync resumes them",
                        address=address, stderr_tail=tail) from None
    if outcome.get("errors"):
        first = outcome["errors"][0]
        more = f" (and {len(outcome['errors']) - 1} more)" if len(outcome["errors"]) > 1 else ""
        raise HostError(transport.name, f"weights fetch into {dest} failed: {first}{more}", address=address)
    return outcome.get("manifest") or {}, int(outcome.get("transferred_bytes", 0))


def _push_local(transport, dest, source: Source, plan: HostPlan, state: HostState, listed: str = ""):
    """A local directory: put each changed file (atomic), hashing it here; then the updated manifest."""
    files = {path: entry for path, entry in state.manifest.items() if path not in plan.remove}
    transferred = 0
    for path in plan.remove:
        transport.run(Command(("rm", "-f", "--", f"{dest}/{path}"), check=False))
    for obj in plan.fetch:
        data = (Path(source.path) / obj.path).read_bytes()
        transport.put(f"{dest}/{obj.path}", data, mode=0o644)
        files[obj.path] = {"key": obj.key, "size": obj.size, "etag": obj.etag, "sha256": hashlib.sha256(data).hexdigest()}
        transferred += len(data)
    doc = {"version": 1, "source": source.text, "listed": listed, "files": files}
    transport.put(f"{dest}/{MANIFEST_NAME}", json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    return files, transferred


def manifest_digests(spec: Spec, transports: Mapping[str, Transport]) -> dict[str, Optional[str]]:
    """For status/doctor: each instance host's manifest digest (None where no weights were synced)."""
    from deployctl.gather import on_hosts

    dest = spec.weights.dest
    if not dest:
        return {name: None for name in weights_hosts(spec)}
    hosts = {name: transports[name] for name in weights_hosts(spec) if name in transports}
    return on_hosts(hosts, lambda transport: read_manifest_digest(transport, dest))


def read_manifest_digest(transport: Transport, dest: str) -> Optional[str]:
    """The digest of the manifest a sync left in `dest` on one host; None when there is none."""
    from deployctl.weights.manifest import parse_manifest

    result = transport.run(Command(("cat", f"{dest}/{MANIFEST_NAME}"), check=False), timeout=60)
    return manifest_digest(parse_manifest(result.stdout)) if result.ok else None


def sync_for_up(spec: Spec, transports: Mapping[str, Transport], ui) -> None:
    """`up`'s weights stage: sync, then say per host what moved (errors propagate and stop `up`).

    Without credentials to list the source, the hosts' manifests decide: when every host holds a complete
    manifest of this very source, identical across hosts, `up` goes on and says it could not list the source."""
    from deployctl.weights.store import MissingCredentials

    try:
        reports = sync_weights(spec, transports, ui)
    except MissingCredentials as error:
        held = held_without_listing(spec, transports)
        if held is None:
            error.hint = (f"{error.hint}; or, when every host already holds these weights, "
                          f"skip this stage: deployctl up {spec.source or 'SPEC'} --skip weights")
            raise
        ui.info(f"weights: every host holds the manifest of {spec.weights.source} ({held}); "
                "source not listed: no credentials")
        return
    moved = sum(r.transferred_bytes for r in reports)
    ui.info(f"stage weights: {len(reports)} host(s) hold {reports[0].files if reports else 0} files"
            + (f", {moved} bytes transferred" if moved else ", nothing to transfer"))
    digests = {r.manifest_digest for r in reports}
    if len(digests) > 1:
        raise HostError(reports[0].host, "hosts hold different weights after sync (manifest digests differ)")


def held_without_listing(spec: Spec, transports: Mapping[str, Transport]) -> Optional[str]:
    """'listed <when>' when every weights host holds a complete manifest of spec's source, the same on all
    (every file present at its recorded size); None otherwise."""
    from deployctl.gather import on_hosts

    hosts = {name: transports[name] for name in weights_hosts(spec)}
    states = on_hosts(hosts, lambda t: read_host_state(t, spec.weights.dest, fetcher_path(spec)))
    digests = {manifest_digest(state.manifest) for state in states.values()}
    if not states or len(digests) != 1 or None in digests:
        return None
    for state in states.values():
        if state.source != spec.weights.source:
            return None
        if any(state.sizes.get(path) != entry.get("size") for path, entry in state.manifest.items()):
            return None
    listed = sorted({state.listed or "at an unrecorded time" for state in states.values()})
    return "listed " + ", ".join(listed)
