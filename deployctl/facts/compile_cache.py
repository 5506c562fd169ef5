"""Which compile caches a host holds whole: each `<cache.dir>/<key>/` that deployctl sealed (its marker names the
digest of the files it held when the servers that wrote it were serving). Pure parser; the probe is constant."""

from __future__ import annotations

import re
from typing import Mapping

from deployctl.facts.probe import Probe

MARKER = ".deployctl-cache"  # in each key directory, written once its servers served: the files' digest
SEALED_DIGEST = re.compile(r"[0-9a-f]{64}")  # what the marker holds: sha256sum's hex (plan/compile_cache.py DIGEST)

# $1: cache.dir. One line per sealed key directory: `<key>\t<digest>`; nothing when the directory is absent.
_LIST = ('for m in "$1"/*/' + MARKER + '; do [ -f "$m" ] || continue; '
         'k=${m%/*}; printf "%s\\t%s\\n" "${k##*/}" "$(head -c 200 "$m")"; done; true')


def cache_probe(cache_dir: str) -> Probe:
    return Probe(("sh", "-c", _LIST, "sh", cache_dir), parse_cache_state, "compile_cache", tool_name="sh")


def parse_cache_state(text: str) -> Mapping[str, str]:
    """key directory name -> the digest its marker holds. A marker that holds no digest (cut, emptied, written by
    something else) is no seal: that directory is not copied to other hosts (its copy could never verify) and is
    sealed anew once its servers serve (plan/compile_cache.py SEAL)."""
    sealed = {}
    for line in text.splitlines():
        key, tab, digest = line.partition("\t")
        if tab and key and SEALED_DIGEST.fullmatch(digest.strip()):
            sealed[key] = digest.strip()
    return sealed
