"""A newer dockerd for one bed host: Debian trixie's `docker.io` (Docker 26), whose `docker save` names each layer
blobs/sha256/<diff ID> as every Docker >= 25 does (moby image/tarexport/save.go, `saveConfigAndLayer`), where the
bed's own bookworm dockerd 20.10 writes <v1 ID>/layer.tar. Only the .deb is fetched (`apt-get download` through a
sources list of its own; the system's packages and lists are not touched) and unpacked into the bed's cache; its
dockerd runs with bookworm's containerd and runc and needs nothing newer than bookworm's glibc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from tests.testbed import layout

SUITE = "trixie"
PACKAGE = "docker.io"
SOURCES = f"""Types: deb
URIs: http://deb.debian.org/debian
Suites: {SUITE}
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def dockerd_dir() -> Path:
    return layout.cache_dir() / f"docker.io-{SUITE}"


def ensure_dockerd() -> Optional[Path]:
    """The newer dockerd binary (downloaded and unpacked once, kept in the bed's cache); None when Debian's
    archive cannot be reached or the binary does not run here (the caller skips, or fails under CI)."""
    binary = dockerd_dir() / "usr" / "sbin" / "dockerd"
    if binary.exists():
        return binary
    dockerd_dir().parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dctl-apt-") as work:
        root = Path(work)
        (root / "parts").mkdir()
        (root / "parts" / f"{SUITE}.sources").write_text(SOURCES)
        (root / "none.list").write_text("")
        for sub in ("lists/partial", "cache/archives/partial"):
            (root / sub).mkdir(parents=True)
        options = ["-o", f"Dir::Etc::SourceList={root / 'none.list'}", "-o", f"Dir::Etc::SourceParts={root / 'parts'}",
                   "-o", f"Dir::State::Lists={root / 'lists'}", "-o", f"Dir::Cache={root / 'cache'}",
                   "-o", "APT::Sandbox::User=root", "-qq"]
        for argv in (["apt-get", *options, "update"], ["apt-get", *options, "download", PACKAGE]):
            result = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                print(f"testbed: no {SUITE} dockerd ({' '.join(argv[-1:])} failed: "
                      f"{(result.stderr or result.stdout).strip()[-300:]})", file=sys.stderr)
                return None
        debs = sorted(root.glob(f"{PACKAGE}_*.deb"))
        tmp = dockerd_dir().parent / f"{dockerd_dir().name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], check=True)
    if subprocess.run([str(tmp / "usr" / "sbin" / "dockerd"), "--version"], capture_output=True).returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    try:
        os.rename(tmp, dockerd_dir())
    except OSError:  # another bed unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return binary
