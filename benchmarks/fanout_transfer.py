"""Host-to-host fan-out of weights and images vs the direct pull, 1/2/4/8 hosts, on a capped link (issue 32).

The bed's S3 (10.200.0.1:8333) and the control machine's SSH traffic to the hosts both leave the root namespace
through the bridge dctlbr0: an HTB qdisc there gives each one class capped at --mbit (default 200 Mbit/s), shared
by all hosts; host-to-host traffic is bridged between the hosts' veths and never passes it. The classes' byte
counters say what the store and the control machine sent.

- weights: a --weights-mib model (4 shards) synced by `sync_weights` (what `weights sync` runs) to the first N
  hosts, shared host to host (deployctl's plan) and direct (every host reads everything from S3: the plan with
  sharing taken out, as before issue 32).
- image: a --image-mib image (one random layer, `docker import`ed on tb1, on no other host) shipped from tb1 to
  N other hosts by `ship_image` (chain) and `_ship_direct` (one `docker save` fanned out by the control machine);
  and two floors with no network, relay, SSH or ID check at all: `paced`, each target's `docker load` fed the
  same tar from its own disk at --mbit, all at once (what any stream to N hosts at that rate costs on this
  machine: the best a chain can do), and `local`, `docker load -i` of it, all at once (the loads alone). For the
  chain, each hop's events (image_relay.py's T lines: stream accepted, first and last byte, the next hop done,
  its load fed and done) are printed, seconds since the ship started. `--only image` runs just this part.
Connections are opened before the clock starts; every run starts from nothing on the targets.

Run as root inside the bed lock:
    flock /tmp/dctl-bed.lock python -m benchmarks.fanout_transfer [--mbit 200] [--only weights|image]

Measured 2026-11-26 (this machine: 2 cores shared with other sessions' work; 200 Mbit/s caps; one round; default
sizes: 512 MiB model, 128 MiB image; seconds, and x the same tool to 1 host; "S3/uplink" = bytes through the
capped class, x the 1-host run's, which is one copy by definition):

    weights  hosts  shared  x1     direct  x1     S3 bytes shared / direct
             1      22.89   1.00   22.80   1.00   1.000 / 1.000   (1.046x the model on the wire: TCP/IP, HTTP)
             2      23.51   1.03   45.45   1.99   1.000 / 2.000
             4      27.12   1.19   90.51   3.97   1.000 / 4.000
             8      25.92   1.13  180.55   7.92   1.000 / 8.000
    image (two runs, same code; x1 = over the same row's 1 host; "floor" = `paced`, see above)
    run    hosts  chain  x1     direct  x1     uplink bytes chain / direct  floor  x1     local `docker load -i`
    1      1       7.23  1.00    7.54   1.00   1.000 / 1.000                6.00   1.00   0.82
           2       7.25  1.00   13.28   1.76   1.000 / 1.999                6.06   1.01   1.10
           4       8.06  1.12   25.86   3.43   1.000 / 3.997                6.93   1.15   2.40
           8      10.08  1.40   50.91   6.75   1.001 / 7.992                8.24   1.37   4.53
    2      1       7.06  1.00    7.01   1.00   1.000 / 1.000                5.97   1.00   0.92
           2       7.06  1.00   13.21   1.88   1.000 / 1.999                6.29   1.05   1.33
           4       8.04  1.14   26.04   3.71   1.000 / 3.997                6.97   1.17   2.50
           8       9.58  1.36   50.65   7.22   1.001 / 7.992                8.13   1.36   4.41

With 32 MiB parts (was 16; same command, --only weights, 2026-11-26): shared 23.55/23.45/24.29/25.46 s for
1/2/4/8 hosts (1.08x for 8), direct 22.90/45.56/90.39/180.43 s (7.88x), the store sent 1.046x the model whatever the
number of hosts.
The image at a 100 Mbit/s cap (--only image --mbit 100, one run): chain 12.65/12.65/13.37/15.10 s (1.19x for 8),
direct 12.50/24.44/48.19/95.68 s (7.66x), paced floor 11.28/11.47/12.31/13.42 s (1.19x): at this rate the 8
loads keep pace with the stream on the bed's 2 cores, and the chain meets 1.3x.
Weights to 8 hosts: 1.13x one host (target <= 1.3x), the store sent one copy (target <= 1.05x). Before parts
were streamed to peers as they landed (a peer waited for the whole part), 8 hosts took 29.43 s (1.28x): all
parts ended at once and the copies between hosts came after.
Image to 8 hosts: 1.36-1.40x one host (was 1.83x: 12.67 s), one copy on the control machine's uplink, and the
same ratio as the floor (1.36-1.37x): this machine cannot do 1.3x, since 8 `docker load`s fed at the capped rate
from local disk, with no network, relay, SSH or check at all, already take 2.2 s more than one (8 dockerds on
2 cores registering the layer at the end; `docker load -i` alone: 4.4-4.5 s for 8 vs 0.8-0.9 s for one). The
chain adds 0.36-0.6 s over that floor for 8 hosts: the relays' start over SSH (first byte at 0.65-0.77 s vs
0.58 s for 2-4 hosts) and a stream 0.2-0.45 s slower while 8 loads unpack on the same cores. The per-hop trace
shows the pipeline: every hop has the last byte within 0.02 s of the first hop (the old relay, by its code,
passed the end of the stream on only after its own `docker load` finished, so each hop added its load's tail:
(12.67 - 6.93) / 7 = 0.8 s per hop in the old figures), and
the 8 loads then finish together 2.6-2.9 s later (0.7 s for one host) - the floor's tail. Real hosts, each
with its own CPUs and disk, do not share that tail.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 1 << 20
PREFIX = "bench-fanout/"
DEST = "/srv/bench-fanout"
IMAGE = "deployctl/bench-fanout:1"
BRIDGE = "dctlbr0"
COUNTS = (1, 2, 4, 8)


def tc(*args: str) -> str:
    return subprocess.run(["tc", *args], check=True, capture_output=True, text=True).stdout


def cap(mbit: int) -> None:
    """S3's answers (sport 8333) in class 1:10, the control machine's SSH traffic (dport 22) in 1:20, both capped."""
    subprocess.run(["tc", "qdisc", "del", "dev", BRIDGE, "root"], capture_output=True)
    tc("qdisc", "add", "dev", BRIDGE, "root", "handle", "1:", "htb", "default", "30")
    tc("class", "add", "dev", BRIDGE, "parent", "1:", "classid", "1:1", "htb", "rate", "40gbit")
    for classid, rate in (("1:10", f"{mbit}mbit"), ("1:20", f"{mbit}mbit"), ("1:30", "40gbit")):
        tc("class", "add", "dev", BRIDGE, "parent", "1:1", "classid", classid, "htb", "rate", rate, "ceil", rate)
    tc("filter", "add", "dev", BRIDGE, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "src",
       "10.200.0.1/32", "match", "ip", "sport", "8333", "0xffff", "flowid", "1:10")
    tc("filter", "add", "dev", BRIDGE, "parent", "1:", "protocol", "ip", "prio", "2", "u32", "match", "ip", "src",
       "10.200.0.1/32", "match", "ip", "dport", "22", "0xffff", "flowid", "1:20")


def uncap() -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", BRIDGE, "root"], capture_output=True)


def class_bytes(classid: str) -> int:
    text = tc("-s", "class", "show", "dev", BRIDGE, "classid", classid)
    match = re.search(r"Sent (\d+) bytes", text)
    return int(match.group(1)) if match else 0


def upload_model(bed, size: int) -> int:
    client = bed.s3.client()
    shard = size // 4
    for index in range(4):
        client.put_object(Bucket=bed.s3.bucket, Key=f"{PREFIX}model-{index:05d}.safetensors", Body=os.urandom(shard))
    client.put_object(Bucket=bed.s3.bucket, Key=f"{PREFIX}config.json", Body=b'{"model_type": "llama"}')
    return 4 * shard + len(b'{"model_type": "llama"}')


def spec_file(bed, directory: Path, hosts: list[str]) -> Path:
    extra = (f"image: {{name: deployctl/standin-vllm:latest}}\n"
             f"weights: {{source: s3://{bed.s3.bucket}/{PREFIX}, endpoint: {bed.s3.endpoint}, dest: {DEST}}}\n"
             "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n")
    instances = "".join(f"    - {{host: {h}, devices: [0], port: 8500}}\n" for h in hosts)
    path = directory / f"fanout-{len(hosts)}.yaml"
    path.write_text(bed.spec_yaml(f"bench-fanout-{len(hosts)}", f"topology:\n  mode: mixed\n  instances:\n{instances}",
                                  hosts_used=hosts, extra=extra))
    return path


def sync_weights_timed(path: Path, shared: bool) -> tuple[float, int]:
    """Seconds of `sync_weights` and the bytes S3 sent meanwhile."""
    import deployctl.plan.weights_stage as weights_stage
    from deployctl.commands.weights import sync_weights
    from deployctl.hosts import connected
    from deployctl.spec.load import load_spec

    spec = load_spec(path)
    real = weights_stage._shared
    if not shared:
        weights_stage._shared = lambda spec, steps: steps  # every host reads everything from the store
    try:
        with connected(spec) as transports:
            before = class_bytes("1:10")
            started = time.monotonic()
            rows = sync_weights(spec, transports)
            seconds = time.monotonic() - started
            sent = class_bytes("1:10") - before
    finally:
        weights_stage._shared = real
    if len({r["manifest_digest"] for r in rows}) != 1:
        raise SystemExit(f"hosts differ: {rows}")
    return seconds, sent


def make_image(bed, size: int) -> None:
    from tests.testbed import images

    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w") as tar:
        info = tarfile.TarInfo("blob.bin")
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    bed.run_on("tb1", [images.docker_cli(), "import", "-", IMAGE], input=blob.getvalue(), timeout=600)


def ship_timed(bed, targets: list[str], chained: bool, trace: dict | None = None) -> tuple[float, int]:
    from deployctl.image.ship import _check_ids, _ship_direct, ship_image
    from deployctl.spec.model import Host, SshSettings
    from deployctl.transport.connect import close_all, open_transports

    for name in targets:
        bed.docker_on(name, "image", "rm", IMAGE, check=False)
    hosts = [Host(h.name, h.address, SshSettings(user=h.user, port=h.port, identity_file=str(h.identity_file),
                                                 known_hosts=str(h.known_hosts)))
             for h in bed.hosts if h.name in ["tb1", *targets]]
    transports, errors = open_transports(hosts)
    try:
        if errors:
            raise SystemExit(f"cannot connect: {errors}")
        source, sinks = transports["tb1"], [transports[n] for n in targets]
        before = class_bytes("1:20")
        started = time.monotonic()
        if chained:
            ship_image(IMAGE, source, sinks, trace=trace)
        else:
            _ship_direct(IMAGE, source, sinks)
            _check_ids(IMAGE, source, sinks)  # the same check the chain makes, in both timings
        return time.monotonic() - started, class_bytes("1:20") - before
    finally:
        close_all(transports)


def on_each(targets: list[str], work) -> None:
    """`work(name)` on every target at once; returns when all are done."""
    import threading

    threads = [threading.Thread(target=work, args=(n,)) for n in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def local_loads_timed(bed, targets: list[str]) -> float:
    """The floor the hosts' own CPUs set: `docker load -i` of the image from each target's disk, all at once."""
    for name in targets:
        bed.docker_on(name, "image", "rm", IMAGE, check=False)
    failures = []

    def load(name):
        result = bed.docker_on(name, "load", "-i", "/srv/bench-fanout-image.tar", check=False)
        if result.returncode:
            failures.append(name)

    started = time.monotonic()
    on_each(targets, load)
    if failures:
        raise SystemExit(f"docker load -i failed on {failures}")
    return time.monotonic() - started


def paced_loads_timed(bed, targets: list[str], mbit: int) -> float:
    """The floor any stream to these hosts has on this machine: each target's `docker load` fed its local copy of
    the image at the capped rate, all at once, as if the stream reached every host at full speed with no relay,
    SSH or ID check in the way. What it takes over one host is what the hosts' shared CPUs and disk cost."""
    from tests.testbed import images

    for name in targets:
        bed.docker_on(name, "image", "rm", IMAGE, check=False)
    rate = mbit * 1e6 / 8
    failures = []

    def load(name, started):
        host = bed.host(name)
        proc = subprocess.Popen([images.docker_cli(), "-H", f"unix://{host.docker_socket}", "load"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        sent = 0
        with open(host.dir / "srv" / "bench-fanout-image.tar", "rb") as tar:
            for chunk in iter(lambda: tar.read(256 * 1024), b""):
                ahead = started + (sent + len(chunk)) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)  # hold the rate the cap allows
                proc.stdin.write(chunk)
                sent += len(chunk)
        proc.stdin.close()
        if proc.wait():
            failures.append(name)

    started = time.monotonic()
    on_each(targets, lambda name: load(name, started))
    if failures:
        raise SystemExit(f"paced docker load failed on {failures}")
    return time.monotonic() - started


def print_trace(trace: dict, targets: list[str]) -> None:
    """Each hop's events, seconds since the ship started (image_relay.py's T lines)."""
    events = ("upstream", "first_byte", "last_byte", "next_done", "load_fed", "load_done", "done")
    print("    hop  " + " ".join(f"{e:>10}" for e in events), flush=True)
    for name in targets:
        row = trace.get(name, {})
        print(f"    {name:<4} " + " ".join(f"{row[e]:>10.2f}" if e in row else f"{'-':>10}" for e in events),
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbit", type=int, default=200, help="tc cap on the S3 link and the control machine's uplink")
    parser.add_argument("--weights-mib", type=int, default=512, help="model size")
    parser.add_argument("--image-mib", type=int, default=128, help="image size")
    parser.add_argument("--only", choices=("weights", "image"), help="run only this part")
    args = parser.parse_args()
    from tests.testbed import Testbed

    bed = Testbed(9).up(9)  # tb1 is the image's source; tb2..tb9 its targets (and tb1..tb8 the weights')
    os.environ.update(bed.s3.env())
    work = Path(tempfile.mkdtemp(prefix="fanout-bench-"))
    rows = []
    try:
        cap(args.mbit)
        if args.only in (None, "weights"):
            total = upload_model(bed, args.weights_mib * MIB)
            print(f"model: {total / MIB:.0f} MiB in 4 shards; S3 capped at {args.mbit} Mbit/s for all hosts",
                  flush=True)
            for count in COUNTS:
                names = [h.name for h in bed.hosts[:count]]
                path = spec_file(bed, work, names)
                for shared in (True, False):
                    for name in names:
                        bed.run_on(name, ["rm", "-rf", DEST])
                    seconds, sent = sync_weights_timed(path, shared)
                    rows.append(("weights", "shared" if shared else "direct", count, seconds, sent, total))
                    print(f"weights {'shared' if shared else 'direct'} {count} host(s): {seconds:.2f} s, "
                          f"S3 sent {sent / MIB:.1f} MiB ({sent / total:.3f}x the model)", flush=True)
            for name in [h.name for h in bed.hosts[:8]]:
                bed.run_on(name, ["rm", "-rf", DEST])
        if args.only in (None, "image"):
            make_image(bed, args.image_mib * MIB)
            size = int(bed.docker_on("tb1", "image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
            print(f"image: {size / MIB:.0f} MiB (one layer, on tb1 only); control machine's SSH uplink capped at "
                  f"{args.mbit} Mbit/s", flush=True)
            bed.docker_on("tb1", "save", "-o", "/srv/bench-fanout-image.tar", IMAGE)
            for host in bed.hosts[1:9]:
                shutil.copy(bed.host("tb1").dir / "srv" / "bench-fanout-image.tar", host.dir / "srv")
            for count in COUNTS:
                targets = [h.name for h in bed.hosts[1:1 + count]]
                for chained in (True, False):
                    trace: dict = {}
                    seconds, sent = ship_timed(bed, targets, chained, trace)
                    rows.append(("image", "chain" if chained else "direct", count, seconds, sent, size))
                    print(f"image {'chain' if chained else 'direct'} {count} host(s): {seconds:.2f} s, "
                          f"control machine sent {sent / MIB:.1f} MiB ({sent / size:.3f}x the image)", flush=True)
                    if trace:
                        print_trace(trace, targets)
                seconds = paced_loads_timed(bed, targets, args.mbit)
                rows.append(("image", "paced", count, seconds, 0, size))
                print(f"image: `docker load` fed from local disk at {args.mbit} Mbit/s on {count} host(s) at once "
                      f"(no network): {seconds:.2f} s", flush=True)
                seconds = local_loads_timed(bed, targets)
                rows.append(("image", "local", count, seconds, 0, size))
                print(f"image: `docker load -i` from local disk on {count} host(s) at once (no network): "
                      f"{seconds:.2f} s", flush=True)
        print()
        # `x size` counts what left through the capped class (TCP/IP, HTTP or SSH framing included); `x 1 host`
        # divides by what the same class carried for one host, which is one copy of the payload by definition.
        print(f"{'what':<8} {'how':<7} {'hosts':>5} {'seconds':>8} {'x 1 host':>8} {'source MiB':>10} {'x size':>7} "
              f"{'x 1 host':>8}")
        for what, how, count, seconds, sent, size in rows:
            one = next(r for r in rows if r[0] == what and r[1] == how and r[2] == 1)
            carried = f"{sent / MIB:>10.1f} {sent / size:>7.3f} {sent / one[4]:>8.3f}" if one[4] else f"{'-':>10} " \
                f"{'-':>7} {'-':>8}"
            print(f"{what:<8} {how:<7} {count:>5} {seconds:>8.2f} {seconds / one[3]:>8.2f} {carried}")
    finally:
        uncap()
        client = bed.s3.client()
        listed = client.list_objects_v2(Bucket=bed.s3.bucket, Prefix=PREFIX).get("Contents", [])
        if listed:
            client.delete_objects(Bucket=bed.s3.bucket, Delete={"Objects": [{"Key": o["Key"]} for o in listed]})
        bed.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
