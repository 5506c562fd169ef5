"""Merge + validate of 1000 hosts x 16 NPUs: target under 0.5 s (issue #6).

Run: python benchmarks/ranktable.py [--hosts 1000] [--devices 16] [--repeat 5]
Prints the first run (it also pays the schema's one-off costs) and the best of --repeat; exit 1 when the
first run misses the target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from deployctl.ranktable.build import build_host_ranktables
from deployctl.ranktable.check import check_ranktable
from deployctl.ranktable.merge import merge
from deployctl.ranktable.model import ranktable_from_document, to_json

TARGET_S = 0.5


def per_host_files(hosts: int, devices: int, tp: int = 8) -> list[str]:
    """What `ranktable gen` writes on each host: even hosts prefill, odd hosts decode, host 0 the scheduler."""
    texts = []
    for h in range(hosts):
        host_ip = f"10.{h // 250}.{h % 250}.1"
        instances = [tuple(range(start, start + tp)) for start in range(0, devices, tp)]
        device_ips = {d: f"11.{h // 250}.{h % 250}.{d + 1}" for d in range(devices)}
        prefill, decode = (instances, []) if h % 2 == 0 else ([], instances)
        files = build_host_ranktables(host_ip, prefill, decode, h == 0, device_ips)
        texts.append(files.files()[files.global_name])
    return texts


def merge_and_validate(texts: list[str]) -> str:
    """Exactly what `ranktable merge` and `ranktable validate --complete` do, minus the disk."""
    documents = [json.loads(t) for t in texts]
    for document in documents:
        if not check_ranktable(document).valid:
            raise SystemExit("benchmark input is invalid")
    merged = to_json(merge([ranktable_from_document(d) for d in documents]))
    result = check_ranktable(json.loads(merged), complete=True)
    if not result.valid:
        raise SystemExit(f"merged file is invalid: {result.problems[:3]}")
    return merged


def timed(repeat: int, function, *args) -> tuple[float, float, object]:
    """(first run, best run, value): the first run also pays the schema's one-off costs."""
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = function(*args)
        times.append(time.perf_counter() - start)
    return times[0], min(times), value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    texts = per_host_files(args.hosts, args.devices)
    first, best, merged = timed(args.repeat, merge_and_validate, texts)
    print(f"{args.hosts} hosts x {args.devices} NPUs: merge + validate {best:.3f} s best of {args.repeat}, "
          f"{first:.3f} s first run (target < {TARGET_S} s; merged file {len(merged) / 1e6:.1f} MB)")
    return 0 if first < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
