"""Run a weights transfer on one host: the host-side fetcher with pre-signed URLs, or files pushed from a local
directory; either way the manifest in dest records what is there."""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping, Sequence

from deployctl.core import Command, Secret
from deployctl.errors import HostError
from deployctl.plan.actions import Fetch
from deployctl.transport import Transport
from deployctl.weights.manifest import MANIFEST_NAME

# 8 connections per host, each on its own file where there are enough files (hashed as the bytes land); 32 MiB
# parts: few requests per GiB for the server (each costs the store CPU of its own: on the bed's SeaweedFS, 16 MiB
# parts came to 0.93-1.06x `s5cmd cp` + `sync`, 32 MiB to 1.00-1.04x, benchmarks/weights_sync.py), 12 part
# buffers (384 MiB) at most on the host.
PART_SIZE = 32 << 20
CONCURRENCY = 8
# Hosts that share a fetch serve their parts on this port of their address (the spec's `hosts[].address`), for
# the length of the fetch only; every request carries the stage's random token.
PEER_PORT = 29471
PEER_CONCURRENCY = 4

Presign = Callable[[str, Sequence[str]], Mapping[str, str]]  # (bucket, keys) -> key: URL


@functools.lru_cache(maxsize=1)
def fetcher_program() -> tuple[bytes, str]:
    """The host-side fetcher and its sha256 (read once per process, whatever the number of hosts)."""
    program = resources.files("deployctl.weights").joinpath("weights_fetch.py").read_bytes()
    return program, hashlib.sha256(program).hexdigest()


def build_job(fetch: Fetch, urls: Mapping[str, str], host: str = "", token: str = "") -> dict:
    """The fetcher's stdin: it holds pre-signed URLs (and the peers' token), so it only ever travels as a Secret."""
    shared = bool(fetch.peers and token and host)
    job = {"dest": fetch.dest, "source": fetch.source, "part_size": PART_SIZE, "concurrency": CONCURRENCY,
           "remove": list(fetch.remove),
           "files": [{"key": o.key, "path": o.path, "size": o.size, "etag": o.etag, "url": urls[o.key],
                      **({"holders": list(fetch.holders.get(o.path, (host,)))} if shared else {})}
                     for o in fetch.objects]}
    if fetch.listed:
        job["listed"] = fetch.listed
    if shared:
        job["swarm"] = {"token": token, "me": host, "peer_concurrency": PEER_CONCURRENCY, "peer_wait": fetch.peer_wait,
                        "peers": {name: [address, PEER_PORT] for name, address in fetch.peers}}
    return job


def run_fetch(transport: Transport, fetch: Fetch, presign: Presign, on_line: Callable[[str], None],
              host: str = "", token: str = "") -> int:
    """Bring dest in line; returns the bytes transferred. With peers and the stage's `token`, the parts are
    shared with the other hosts of the stage (`host` is this one's name among them)."""
    if fetch.local_root is not None:
        return _push_local(transport, fetch)
    program, _ = fetcher_program()
    if fetch.send_fetcher:
        transport.put(fetch.fetcher_path, program, mode=0o644)
    urls = presign(fetch.bucket, sorted({o.key for o in fetch.objects}))
    job = build_job(fetch, urls, host, token)
    command = Command(("python3", fetch.fetcher_path), stdin=Secret(json.dumps(job), "weights job (pre-signed URLs)"))
    result = transport.run_streaming(command, on_line, timeout=None)
    try:
        outcome = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("P "))
        raise HostError(transport.name, f"weights fetch into {fetch.dest} stopped (exit {result.exit_code}); "
                                        "partial files stay and the next sync resumes them",
                        address=transport.address, stderr_tail=tail) from None
    if outcome.get("errors"):
        first = outcome["errors"][0]
        more = f" (and {len(outcome['errors']) - 1} more)" if len(outcome["errors"]) > 1 else ""
        raise HostError(transport.name, f"weights fetch into {fetch.dest} failed: {first}{more}",
                        address=transport.address)
    return int(outcome.get("transferred_bytes", 0))


def _push_local(transport: Transport, fetch: Fetch) -> int:
    """A local directory: put each changed file (atomic), hashing it here; then the updated manifest."""
    files = {path: entry for path, entry in fetch.manifest.items() if path not in fetch.remove}
    transferred = 0
    for path in fetch.remove:
        transport.run(Command(("rm", "-f", "--", f"{fetch.dest}/{path}"), check=False))
    for obj in fetch.objects:
        data = (Path(fetch.local_root) / obj.path).read_bytes()
        transport.put(f"{fetch.dest}/{obj.path}", data, mode=0o644)
        files[obj.path] = {"key": obj.key, "size": obj.size, "etag": obj.etag,
                           "sha256": hashlib.sha256(data).hexdigest()}
        transferred += len(data)
    doc = {"version": 1, "source": fetch.source, "listed": fetch.listed, "files": files}
    transport.put(f"{fetch.dest}/{MANIFEST_NAME}", json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    return transferred

