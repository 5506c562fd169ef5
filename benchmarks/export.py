"""`deployctl export` of a 64-instance spec, in a new process as users run it: target < 1 s.

Run: python benchmarks/export.py [--runs 5]. Two shapes: 64 AscendCloud mixed instances on 8 hosts (--to k8s:
64 Deployments) and vllm-ascend P/D with 64 external-launch ranks on 8 hosts (--to lws: 2 LeaderWorkerSets of 4
pods, the proxy listing all 64). Prints each median and PASS/FAIL; exits 1 when a target is missed. Not a test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from cli_startup import deployctl_argv, median_seconds  # this folder is on sys.path when run as a script

TARGET_S = 1.0
HOSTS = 8


def head(server: str) -> str:
    hosts = "".join(f"  node{i}: {{address: 10.200.0.{i + 1}}}\n" for i in range(HOSTS))
    return (f"version: 1\nname: bench-export\n{server}hosts:\n{hosts}"
            'requirements: {driver: "23.0.6", cards: 8}\n'
            "image: {name: quay.io/ascend/vllm-ascend:v0.23.0-a3}\n"
            "weights: {source: s3://models/qwen3/, dest: /mnt/weights/qwen3}\n"
            "model: {served_name: qwen3, max_model_len: 8192, max_num_batched_tokens: 8192}\n"
            "env: {VLLM_USE_V1: 1, HF_TOKEN: '${HF_TOKEN}'}\n")


def mixed_spec() -> str:
    """64 one-NPU instances, 8 per host."""
    instances = "".join(f"    - {{host: node{h}, devices: [{d}], port: {8000 + d}}}\n"
                        for h in range(HOSTS) for d in range(8))
    return head("") + f"topology:\n  mode: mixed\n  instances:\n{instances}"


def pd_spec() -> str:
    """vllm-ascend P/D, external launch: prefill and decode each dp 32 x tp 1 over 4 hosts = 64 servers."""
    def group(hosts: range) -> str:
        return (f"    - {{hosts: [{', '.join(f'node{h}' for h in hosts)}], dp: 32, tp: 1, port: 9100}}\n")
    return (head("server: vllm-ascend\n") +
            "topology:\n  mode: disaggregated\n  connector: mooncake\n  dp_launch: external\n"
            "  proxy: {host: node0, port: 8000}\n"
            f"  prefill:\n{group(range(0, 4))}  decode:\n{group(range(4, 8))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for label, text, target in (("64 mixed instances --to k8s", mixed_spec(), "k8s"),
                                    ("64 vllm-ascend ranks --to lws", pd_spec(), "lws")):
            spec = Path(folder) / f"{target}.yaml"
            spec.write_text(text)
            argv = deployctl_argv() + ["export", str(spec), "--to", target, "--weights-pvc", "models",
                                       "--secret", "tokens"]
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                return 1
            objects = done.stdout.count("\n---\n") + 1
            seconds = median_seconds(argv, args.runs)
            passed = seconds < TARGET_S
            ok &= passed
            print(f"export {label}: {seconds * 1000:6.0f} ms for {objects} objects, {len(done.stdout)} bytes "
                  f"(median of {args.runs}; target < {TARGET_S * 1000:.0f} ms)  {'PASS' if passed else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
