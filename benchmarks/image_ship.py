"""Ship a ~60 MB image from tb1 to 7 hosts vs to 1 host, beside a plain `docker save | ssh docker load` fan-out.

Same work on both sides: each is timed as a whole process from spawn to exit, SSH handshakes included.
deployctl: benchmarks/ship_process.py (interpreter start, imports, parallel connections, one `docker save`
streamed to every `docker load`). Plain: one bash running `ssh tb1 docker save | ssh target docker load` per
target, all at once, then `wait` (one save per target, as people script it).

Run as root, inside the bed lock:  flock /tmp/dctl-bed.lock python -m benchmarks.image_ship [--rounds 2]
Prints a table (tool, hosts, median seconds) and every round.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed import Testbed

HERE = Path(__file__).resolve().parent


def ssh_argv(host) -> list[str]:
    return ["ssh", "-i", str(host.identity_file), "-o", f"UserKnownHostsFile={host.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(host.port),
            f"{host.user}@{host.address}"]


def entry(host) -> dict:
    return {"name": host.name, "address": host.address, "port": host.port, "user": host.user,
            "identity_file": str(host.identity_file), "known_hosts": str(host.known_hosts)}


def timed(argv, stdin: str | None = None) -> float:
    started = time.monotonic()
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"{argv[:3]} exited {result.returncode}:\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}")
    return elapsed


def deployctl_ship(image: str, source, targets) -> float:
    job = {"image": image, "source": entry(source), "targets": [entry(t) for t in targets]}
    return timed([sys.executable, str(HERE / "ship_process.py")], json.dumps(job))


def plain_fanout(image: str, source, targets) -> float:
    """What people script by hand: one `docker save | ssh target docker load` pipeline per target, in parallel."""
    save = shlex.join(ssh_argv(source) + ["docker", "save", image])
    lines = ["set -o pipefail", "pids="]
    lines += [f"{save} | {shlex.join(ssh_argv(t) + ['docker', 'load'])} >/dev/null & pids=\"$pids $!\""
              for t in targets]
    lines += ["status=0", "for p in $pids; do wait $p || status=1; done", "exit $status"]
    return timed(["bash", "-c", "\n".join(lines)])


def drop(bed, image: str, names) -> None:
    for name in names:
        bed.docker_on(name, "image", "rm", "--force", image, check=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    bed = Testbed(8).up(8)
    try:
        image = bed.standin_image
        size = int(bed.docker_on("tb1", "image", "inspect", "--format", "{{.Size}}", image).stdout)
        source, targets = bed.hosts[0], bed.hosts[1:]
        others = [h.name for h in targets]
        runs = {("deployctl", 1): lambda: deployctl_ship(image, source, targets[:1]),
                ("deployctl", len(targets)): lambda: deployctl_ship(image, source, targets),
                ("plain save|ssh load", 1): lambda: plain_fanout(image, source, targets[:1]),
                ("plain save|ssh load", len(targets)): lambda: plain_fanout(image, source, targets)}
        figures = {key: [] for key in runs}
        for round_index in range(args.rounds):
            order = list(runs) if round_index % 2 == 0 else list(runs)[::-1]
            for key in order:
                drop(bed, image, others)
                figures[key].append(runs[key]())
        median = {key: statistics.median(values) for key, values in figures.items()}
        print(f"image {image}: {size / 1e6:.0f} MB from tb1; whole processes, SSH handshakes included; "
              f"median of {args.rounds} round(s)")
        print(f"{'tool':<20} {'hosts':>5} {'seconds':>8}   all rounds")
        for (tool, hosts), values in figures.items():
            print(f"{tool:<20} {hosts:>5} {median[(tool, hosts)]:>8.2f}   {', '.join(f'{v:.2f}' for v in values)}")
        n = len(targets)
        ours, plain = median[("deployctl", n)], median[("plain save|ssh load", n)]
        print(f"deployctl to {n} hosts = {ours / median[('deployctl', 1)]:.2f}x one host; "
              f"plain fan-out / deployctl = {plain / ours:.2f}x")
    finally:
        bed.down()


if __name__ == "__main__":
    main()
