"""CLI start-up: `deployctl --help` vs `python -c pass`, and `deployctl validate` on a 64-host spec.

Run: python benchmarks/cli_startup.py [--runs 10]. Prints each figure, its target and PASS/FAIL;
exits 1 when a target is missed. Not a test: pytest collects only tests/.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELP_RATIO_TARGET = 3.0  # deployctl --help at most 3x a bare interpreter start
VALIDATE_TARGET_S = 0.2  # validate of a 64-host spec: the target of issue 17, as in benchmarks/spec_input.py


def deployctl_argv() -> list[str]:
    """The installed console script when there is one (what users run), else `python -m deployctl`."""
    script = shutil.which("deployctl")
    return [script] if script else [sys.executable, "-m", "deployctl"]


def median_seconds(argv: list[str], runs: int) -> float:
    subprocess.run(argv, capture_output=True)  # warm the page cache and .pyc files
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def spec_for_hosts(count: int) -> str:
    """A disaggregated spec: on each host a prefill (NPUs 0-3) and a decode (4-7); the scheduler on the first."""
    hosts = "".join(f"  node{i}: {{address: 10.200.0.{i + 1}}}\n" for i in range(count))
    prefill = "".join(f"    - {{host: node{i}, devices: [0, 1, 2, 3], port: 8088}}\n" for i in range(count))
    decode = "".join(f"    - {{host: node{i}, devices: [4, 5, 6, 7], port: 8089}}\n" for i in range(count))
    return (
        "version: 1\nname: bench-64\n"
        f"hosts:\n{hosts}"
        'requirements: {driver: "23.0.6", cards: 8, npu_memory_gb: 64}\n'
        "image: {name: deployctl/vllm-ascend:6.3.909}\n"
        "weights: {source: s3://models/llama3-70b/, dest: /mnt/weights/llama3-70b}\n"
        "model: {served_name: llama3-70b, max_model_len: 8192, max_num_batched_tokens: 8192}\n"
        "topology:\n  mode: disaggregated\n  scheduler: {host: node0, port: 9000}\n"
        f"  prefill:\n{prefill}  decode:\n{decode}"
    )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hosts", type=int, default=64)
    args = parser.parse_args()

    bare = median_seconds([sys.executable, "-c", "pass"], args.runs)
    help_time = median_seconds(deployctl_argv() + ["--help"], args.runs)
    ratio = help_time / bare
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "spec.yaml"
        spec.write_text(spec_for_hosts(args.hosts))
        check = subprocess.run(deployctl_argv() + ["validate", str(spec), "-q"], capture_output=True, text=True)
        if check.returncode != 0:
            sys.stderr.write(check.stderr)
            return 1
        validate_time = median_seconds(deployctl_argv() + ["validate", str(spec), "-q"], args.runs)

    help_ok, validate_ok = ratio <= HELP_RATIO_TARGET, validate_time <= VALIDATE_TARGET_S
    print(f"python -c pass:               {bare * 1000:7.1f} ms (median of {args.runs})")
    print(f"deployctl --help:             {help_time * 1000:7.1f} ms = {ratio:.2f}x python "
          f"(target <= {HELP_RATIO_TARGET:.0f}x)  {verdict(help_ok)}")
    print(f"deployctl validate {args.hosts} hosts:   {validate_time * 1000:7.1f} ms "
          f"(target <= {VALIDATE_TARGET_S * 1000:.0f} ms)  {verdict(validate_ok)}")
    return 0 if help_ok and validate_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
