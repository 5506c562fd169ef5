"""deployctl's side of image_ship as a whole process: connect to source and targets in parallel, ship, close.

    python benchmarks/ship_process.py < job.json
job.json: {"image", "source": host, "targets": [host]}, a host being {"name", "address", "port", "user",
"identity_file", "known_hosts"}. The same calls `image build` makes for `where: once` (open_transports, ship_image).
"""

from __future__ import annotations

import json
import sys

from deployctl.image.ship import ship_image
from deployctl.spec.model import Host, SshSettings
from deployctl.transport.connect import close_all, open_transports


def host(entry: dict) -> Host:
    return Host(entry["name"], entry["address"], SshSettings(
        user=entry["user"], port=entry["port"], identity_file=entry["identity_file"],
        known_hosts=entry["known_hosts"]))


def main() -> None:
    job = json.load(sys.stdin)
    source, targets = host(job["source"]), [host(t) for t in job["targets"]]
    transports, errors = open_transports([source, *targets])
    try:
        if errors:
            raise SystemExit(f"cannot connect: {', '.join(e.message for e in errors.values())}")
        ship_image(job["image"], transports[source.name], [transports[t.name] for t in targets])
    finally:
        close_all(transports)


if __name__ == "__main__":
    main()
