"""`python -m tests.testbed up [--hosts N] | down | status | demo [--down]`."""

from __future__ import annotations

import argparse
import json
import sys
import time

from tests.testbed import demo
from tests.testbed.bed import Testbed, TestbedError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testbed", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    up = verbs.add_parser("up", help="remove leftovers, then start N hosts, S3 and images")
    up.add_argument("--hosts", type=int, default=None, help="number of hosts (default: $DEPLOYCTL_TESTBED_HOSTS or 4)")
    verbs.add_parser("down", help="stop everything and remove all state")
    verbs.add_parser("status", help="show what is up")
    run_demo = verbs.add_parser("demo", help="2 hosts + S3 + a tiny model, then `deployctl up playbooks/demo-pd.yaml`")
    run_demo.add_argument("--down", action="store_true", help="tear the bed down afterwards")
    args = parser.parse_args(argv)
    try:
        if args.verb == "up":
            bed = Testbed(args.hosts).up()
            for host in bed.hosts:
                print(f"{host.name}  {host.address}  ssh root@{host.address} -i {host.identity_file} "
                      f"-o UserKnownHostsFile={host.known_hosts}")
            print(f"s3   {bed.s3.endpoint} bucket={bed.s3.bucket} credentials: {bed.root}/s3/credentials")
            print("timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in bed.timings.items()))
            return 0
        if args.verb == "down":
            started = time.monotonic()
            Testbed().down()
            print(f"test bed down in {time.monotonic() - started:.2f}s")
            return 0
        if args.verb == "status":
            print(json.dumps(Testbed().status(), indent=2))
            return 0
        return demo.run(tear_down=args.down)
    except TestbedError as error:
        print(f"test bed: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
