"""Ship a ~60 MB image from tb1 to 7 hosts vs to 1 host, beside a plain `docker save | ssh docker load` fan-out.

Run as root, inside the bed lock:  flock /tmp/dctl-bed.lock python -m benchmarks.image_ship [--rounds 2]
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from deployctl.image.ship import ship_image
from deployctl.spec.model import Host, SshSettings
from deployctl.transport.ssh import SshTransport
from tests.testbed import Testbed


def transport(host) -> SshTransport:
    return SshTransport(Host(host.name, host.address, SshSettings(
        user=host.user, port=host.port, identity_file=str(host.identity_file), known_hosts=str(host.known_hosts))))


def ssh_argv(host) -> list[str]:
    return ["ssh", "-i", str(host.identity_file), "-o", f"UserKnownHostsFile={host.known_hosts}",
            "-o", "BatchMode=yes", "-p", str(host.port), f"{host.user}@{host.address}"]


def plain_fanout(image: str, source, targets) -> float:
    """What people script by hand: one `docker save | ssh target docker load` pipeline per target, in parallel."""
    def one(target):
        line = (f"{shlex.join(ssh_argv(source) + ['docker', 'save', image])} | "
                f"{shlex.join(ssh_argv(target) + ['docker', 'load'])}")
        subprocess.run(line, shell=True, check=True, capture_output=True)
    started = time.monotonic()
    with ThreadPoolExecutor(len(targets)) as pool:
        list(pool.map(one, targets))
    return time.monotonic() - started


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
        hosts = bed.hosts
        source = transport(hosts[0])
        targets = [transport(h) for h in hosts[1:]]
        others = [h.name for h in hosts[1:]]
        figures = {"one": [], "seven": [], "plain": []}
        for _ in range(args.rounds):
            drop(bed, image, others)
            started = time.monotonic()
            ship_image(image, source, targets[:1])
            figures["one"].append(time.monotonic() - started)
            drop(bed, image, others)
            started = time.monotonic()
            ship_image(image, source, targets)
            figures["seven"].append(time.monotonic() - started)
            drop(bed, image, others)
            figures["plain"].append(plain_fanout(image, hosts[0], hosts[1:]))
        for t in (source, *targets):
            t.close()
        best = {k: min(v) for k, v in figures.items()}
        print(f"image {image}: {size / 1e6:.0f} MB; best of {args.rounds} rounds")
        print(f"deployctl ship to 1 host : {best['one']:.2f} s   (all: {', '.join(f'{x:.2f}' for x in figures['one'])})")
        print(f"deployctl ship to 7 hosts: {best['seven']:.2f} s   (all: {', '.join(f'{x:.2f}' for x in figures['seven'])})"
              f"  = {best['seven'] / best['one']:.2f}x one host")
        print(f"plain save|ssh load x7   : {best['plain']:.2f} s   (all: {', '.join(f'{x:.2f}' for x in figures['plain'])})"
              f"  deployctl is {best['plain'] / best['seven']:.2f}x faster")
    finally:
        bed.down()


if __name__ == "__main__":
    main()
