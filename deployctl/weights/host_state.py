"""The one round trip that tells what a host already holds: manifest, file sizes under dest, free space, and the
digest of the fetcher program left by an earlier sync (so an unchanged one is not sent again)."""

from __future__ import annotations

import json

from deployctl.errors import HostError
from deployctl.core import Command
from deployctl.transport import Transport
from deployctl.weights.manifest import MANIFEST_NAME, HostState

# A constant program; dest and the fetcher's path reach it as arguments. Runs on the host's python3 (>= 3.7).
STATE_SCRIPT = r"""
import hashlib, json, os, sys
dest = sys.argv[1]
out = {"manifest": None, "sizes": {}, "fetcher": None}
try:
    with open(sys.argv[3], "rb") as f:
        out["fetcher"] = hashlib.sha256(f.read()).hexdigest()
except OSError:
    pass
try:
    with open(os.path.join(dest, sys.argv[2])) as f:
        doc = json.load(f)
    out["manifest"], out["source"], out["listed"] = doc.get("files", {}), doc.get("source"), doc.get("listed")
except (OSError, ValueError, AttributeError):
    pass
for root, dirs, files in os.walk(dest):
    for name in files:
        full = os.path.join(root, name)
        try:
            out["sizes"][os.path.relpath(full, dest)] = os.stat(full).st_size
        except OSError:
            pass
probe = dest
while not os.path.isdir(probe) and probe not in ("/", ""):
    probe = os.path.dirname(probe)
st = os.statvfs(probe or "/")
out["free"], out["free_path"] = st.f_bavail * st.f_frsize, probe
sys.stdout.write(json.dumps(out))
"""


def state_command(dest: str, fetcher: str) -> Command:
    return Command(("python3", "-c", STATE_SCRIPT, dest, MANIFEST_NAME, fetcher))


def read_host_state(transport: Transport, dest: str, fetcher: str) -> HostState:
    """What `dest` holds on one host (and the digest of the fetcher at path `fetcher`, if any)."""
    result = transport.run(state_command(dest, fetcher), timeout=120)
    if result.exit_code == 127 or "python3: not found" in result.stderr or "No such file" in result.stderr[:200]:
        raise HostError(transport.name, "python3 is not installed; weights sync runs its fetcher with python3",
                        address=getattr(transport, "address", None), hint="install python3 (>= 3.7) on the host")
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        raise HostError(transport.name, f"cannot read the state of {dest}", address=getattr(transport, "address", None),
                        exit_code=result.exit_code, stderr_tail=result.stderr) from None
    return parse_state(doc)


def parse_state(doc: dict) -> HostState:
    return HostState(manifest=doc.get("manifest") or {}, sizes=doc.get("sizes") or {},
                     free_bytes=int(doc.get("free", 0)), free_path=str(doc.get("free_path", "/")),
                     fetcher_digest=doc.get("fetcher"), source=doc.get("source"), listed=doc.get("listed"))
