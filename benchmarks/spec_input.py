"""Spec input: `deployctl validate` of a 64-host spec, and 1 MB hostile YAML files refused in bounded time.

Run: python benchmarks/spec_input.py [--runs 5]. Each figure is the wall time of the whole command (interpreter
start included), median of the runs, with the command's peak memory; prints PASS/FAIL per target and exits 1
when one is missed. Not a test: pytest collects only tests/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli_startup import deployctl_argv, spec_for_hosts

VALIDATE_TARGET_S = 0.2  # validate of a 64-host spec (issue 17)
HOSTILE_TARGET_S = 1.0  # a 1 MB hostile YAML refused (issue 17)
MB = 1024 * 1024


def alias_bomb(size: int) -> str:
    """Billion laughs, 26 levels deep (9**26 values), after comment lines that make the file `size` bytes."""
    names = "abcdefghijklmnopqrstuvwxyz"
    lines = [f"a: &a [{','.join(['lol'] * 9)}]"]
    lines += [f"{name}: &{name} [{','.join(['*' + before] * 9)}]" for before, name in zip(names, names[1:])]
    bomb = "\n".join(lines) + "\n"
    return pad(size - len(bomb)) + bomb


def merge_bomb(size: int) -> str:
    lines = ["m0: &m0 {k: v}"] + [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}" for i in range(1, 30)]
    bomb = "\n".join(lines) + "\n"
    return pad(size - len(bomb)) + bomb


def pad(size: int) -> str:
    line = "# " + "x" * 77 + "\n"
    return line * (size // len(line))


def deep_flow(size: int) -> str:
    return "[" * (size // 2) + "]" * (size // 2)


def deep_block(size: int) -> str:
    return "- " * (size // 2 - 1) + "x\n"


def flat_list(size: int) -> str:
    return "".join(f"- {i:06d}\n" for i in range(size // 9))


def flat_mapping(size: int) -> str:
    return "".join(f"key{i:07d}: value\n" for i in range(size // 18))


def leading_zeros(size: int) -> str:
    """Just under the value limit, every value an error: the cost of finding and reporting many problems."""
    head = ("version: 1\nname: x\nhosts: {n1: {address: 10.0.0.1}}\n"
            "topology: {mode: mixed, instances: [{host: n1, devices: [0], port: 80}]}\n"
            "model:\n  served_name: m\n  extra_args:\n")
    return head + "    - 010\n" * min(49_900, (size - len(head)) // 10)


HOSTILE = {"alias bomb": alias_bomb, "merge bomb": merge_bomb, "deep [[[...]]]": deep_flow,
           "deep - - - ...": deep_block, "flat list": flat_list, "flat mapping": flat_mapping,
           "49.9k errors": leading_zeros}


def run_once(argv: list[str]) -> tuple[float, int, int, str]:
    """(seconds, exit code, peak RSS in MiB, stderr) of one run."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return seconds, process.returncode, usage.ru_maxrss // 1024, err.read().decode(errors="replace")


def measure(argv: list[str], runs: int) -> tuple[float, int, int, str]:
    run_once(argv)  # warm the page cache and .pyc files
    results = [run_once(argv) for _ in range(runs)]
    return (statistics.median(r[0] for r in results), results[-1][1], max(r[2] for r in results), results[-1][3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=MB, help="bytes of each hostile file (default 1 MiB)")
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "hosts64.yaml"
        spec.write_text(spec_for_hosts(64))
        seconds, code, rss, stderr = measure(deployctl_argv() + ["validate", str(spec), "-q"], args.runs)
        passed = code == 0 and seconds <= VALIDATE_TARGET_S
        ok &= passed
        print(f"{'validate 64 hosts':24} {spec.stat().st_size / 1024:7.0f} KiB {seconds * 1000:7.1f} ms "
              f"{rss:4d} MiB exit {code}  (target <= {VALIDATE_TARGET_S * 1000:.0f} ms)  {'PASS' if passed else 'FAIL'}")
        files = [(name, Path(folder) / f"hostile{i}.yaml") for i, name in enumerate(HOSTILE)]
        for (name, path) in files:
            path.write_text(HOSTILE[name](args.size))
        for name, path in files + [("/dev/zero", Path("/dev/zero"))]:
            seconds, code, rss, stderr = measure(deployctl_argv() + ["validate", str(path), "-q"], args.runs)
            passed = code == 2 and "Traceback" not in stderr and seconds < HOSTILE_TARGET_S
            ok &= passed
            size = "-" if path.is_char_device() else f"{path.stat().st_size / 1024:.0f}"
            first = next((line.split(": ", 1)[1] for line in stderr.splitlines() if line.startswith(str(path))), "")
            print(f"{name:24} {size:>7} KiB {seconds * 1000:7.1f} ms {rss:4d} MiB exit {code}  "
                  f"(target < {HOSTILE_TARGET_S * 1000:.0f} ms, exit 2)  {'PASS' if passed else 'FAIL'}  {first}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
