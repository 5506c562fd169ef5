"""What a host's weights.dest holds: the manifest, every file's size, free space, and the digest of the fetcher
program an earlier sync left (so an unchanged one is not sent again)."""

from __future__ import annotations

import json

from deployctl.errors import FactParseError
from deployctl.facts.probe import Probe
from deployctl.weights.manifest import MANIFEST_NAME, HostState

# A constant program; dest and the fetcher's path reach it as arguments. Runs on the host's python3 (>= 3.7).
STATE_SCRIPT = r"""
import hashlib, json, os, sys
dest = sys.argv[1]
out = {"sizes": {}, "fetcher": None}
try:
    with open(sys.argv[3], "rb") as f:
        out["fetcher"] = hashlib.sha256(f.read()).hexdigest()
except OSError:
    pass
try:  # its text, judged by the controller (a damaged manifest is said, and rebuilt)
    with open(os.path.join(dest, sys.argv[2]), "rb") as f:
        out["manifest_text"] = f.read(64 << 20).decode("utf-8", "replace")
except OSError:
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


def weights_probe(dest: str, fetcher: str) -> Probe:
    return Probe(("python3", "-c", STATE_SCRIPT, dest, MANIFEST_NAME, fetcher), parse_weights_state, "weights")


def parse_weights_state(text: str) -> HostState:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise FactParseError("python3 (weights state)", 1, text[:80], "one JSON object")
    from deployctl.weights.manifest import read_manifest

    files, damaged, manifest = read_manifest(doc.get("manifest_text") or "")
    source, listed = manifest.get("source"), manifest.get("listed")
    return HostState(manifest=files, sizes=doc.get("sizes") or {},
                     free_bytes=int(doc.get("free", 0)), free_path=str(doc.get("free_path", "/")),
                     fetcher_digest=doc.get("fetcher"), source=source if isinstance(source, str) else None,
                     listed=listed if isinstance(listed, str) else None, damaged=damaged)


def manifest_probe(dest: str) -> Probe:
    """The manifest alone (the doctor compares digests across hosts; no walk of dest)."""
    return Probe(("cat", f"{dest}/{MANIFEST_NAME}"), parse_manifest_state, "weights")


def parse_manifest_state(text: str) -> HostState:
    from deployctl.weights.manifest import read_manifest

    files, damaged, _ = read_manifest(text)
    return HostState(manifest=files, sizes={}, free_bytes=0, free_path="", damaged=damaged)
