"""Fake `nvidia-smi` for GPU test hosts: renders the real formats (tests/fixtures/formats/nvidia-smi/) from a profile.

Embedded verbatim (with an entry point) as the fallback of the sh tool at a GPU host's /usr/local/bin/nvidia-smi
(prerender.py), so it stays standalone: stdlib only, Python >= 3.7. The renderer is pure (argv, profile -> stdout, exit code).
"""

from __future__ import annotations

import json
import os
import sys
import time

PROFILE_PATH = "/etc/deployctl-fake/profile.json"

GPU_DEFAULTS = {
    "gpus": 1,
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "gpu_memory_mib": 81559,
    "nvidia_driver": "580.159.04",
    "gpu_idle_used_mib": 0,  # memory.used of a GPU no process holds (R580 shows 0, R550 shows 1)
    "gpu_uuids": None,  # per GPU; default GPU-6f1c2a4e-0b7d-4c9e-9a21-3d5e7f801aNN (NN = index + 1)
    "gpu_processes": {},  # gpu index -> [{"pid": 48213, "name": "/usr/bin/python3", "memory_mib": 72514}]
    "nvidia_runtime": True,  # dockerd lists an `nvidia` runtime and finds nvidia-container-runtime-hook
}

# field -> (header with unit, unit suffix of values)
GPU_FIELDS = {
    "index": ("index", ""),
    "name": ("name", ""),
    "uuid": ("uuid", ""),
    "memory.total": ("memory.total [MiB]", " MiB"),
    "memory.used": ("memory.used [MiB]", " MiB"),
    "memory.free": ("memory.free [MiB]", " MiB"),
    "driver_version": ("driver_version", ""),
    "count": ("count", ""),
}
# The header says used_gpu_memory even when the query asked used_memory (real R580 capture).
APP_FIELDS = {
    "gpu_uuid": ("gpu_uuid", ""),
    "pid": ("pid", ""),
    "process_name": ("process_name", ""),
    "used_memory": ("used_gpu_memory [MiB]", " MiB"),
    "used_gpu_memory": ("used_gpu_memory [MiB]", " MiB"),
}
NO_DEVICES = "No devices were found\n"


def with_gpu_defaults(profile):
    return {**GPU_DEFAULTS, **{k: v for k, v in profile.items() if v is not None or k not in GPU_DEFAULTS}}


def gpu_uuid(profile, index):
    uuids = profile.get("gpu_uuids")
    if uuids and index < len(uuids):
        return uuids[index]
    return "GPU-6f1c2a4e-0b7d-4c9e-9a21-3d5e7f801a%02x" % (index + 1)


def processes(profile, index):
    table = profile.get("gpu_processes") or {}
    return table.get(str(index)) or table.get(index) or []


def gpu_values(profile, index):
    used = int(profile["gpu_idle_used_mib"]) + sum(int(p["memory_mib"]) for p in processes(profile, index))
    total = int(profile["gpu_memory_mib"])
    return {
        "index": str(index), "name": profile["gpu_name"], "uuid": gpu_uuid(profile, index),
        "memory.total": str(total), "memory.used": str(used), "memory.free": str(total - used),
        "driver_version": profile["nvidia_driver"], "count": str(profile["gpus"]),
    }


def _format(argv):
    for word in argv:
        if word.startswith("--format="):
            return set(word[len("--format="):].split(","))
    return None


def _table(fields, known, rows, options):
    out = []
    if "noheader" not in options:
        out.append(", ".join(known[f][0] for f in fields))
    for row in rows:
        units = "nounits" not in options
        out.append(", ".join(row[f] + (known[f][1] if units else "") for f in fields))
    return "".join(line + "\n" for line in out)


def _selected(profile, argv):
    """GPU indices after `-i N` (None: no such GPU)."""
    count = int(profile["gpus"])
    for i, word in enumerate(argv):
        if word in ("-i", "--id") and i + 1 < len(argv):
            wanted = argv[i + 1]
            return [int(wanted)] if wanted.isdigit() and int(wanted) < count else None
    return list(range(count))


def render(argv, profile):
    """(stdout, exit code) of `nvidia-smi ARGV` on a host with this profile."""
    profile = with_gpu_defaults(profile)
    selected = _selected(profile, argv)
    if selected is None or int(profile["gpus"]) == 0:
        return NO_DEVICES, 6
    options = _format(argv)
    for word in argv:
        if word.startswith("--query-gpu=") or word.startswith("--query-compute-apps="):
            key, _, value = word.partition("=")
            fields = value.split(",")
            known = GPU_FIELDS if key == "--query-gpu" else APP_FIELDS
            for field in fields:
                if field not in known:
                    return 'Field "%s" is not a valid field to query.\n\n' % field, 2
            if options is None:
                return "'--format' option is missing.\n", 2
            if key == "--query-gpu":
                rows = [gpu_values(profile, n) for n in selected]
            else:
                rows = [{"gpu_uuid": gpu_uuid(profile, n), "pid": str(p["pid"]), "process_name": p["name"],
                         "used_memory": str(p["memory_mib"]), "used_gpu_memory": str(p["memory_mib"])}
                        for n in selected for p in processes(profile, n)]
            return _table(fields, known, rows, options), 0
    if "-L" in argv or "--list-gpus" in argv:
        return "".join("GPU %d: %s (UUID: %s)\n" % (n, profile["gpu_name"], gpu_uuid(profile, n))
                       for n in selected), 0
    return "fake nvidia-smi: only --query-gpu, --query-compute-apps and -L are emulated\n", 2


def main(argv):
    try:  # $DEPLOYCTL_FAKE_DIR: see fakes.load_profile
        with open(os.environ.get("DEPLOYCTL_FAKE_DIR", "/etc/deployctl-fake") + "/profile.json") as handle:
            profile = json.load(handle)
    except OSError:
        profile = {}
    path = profile.get("calls_log")
    if path:
        try:
            with open(path, "a") as log:
                log.write(json.dumps({"time": time.time(), "tool": "nvidia-smi", "argv": argv,
                                      "pid": os.getpid()}) + "\n")
        except OSError:
            pass
    stdout, code = render(argv, profile)
    sys.stdout.write(stdout)
    return code
