"""The SSH-library peers of doctor_fanout, each run as its own process so that start-up is timed as deployctl's is.

    python benchmarks/fanout_peers.py asyncssh|pssh per-command|batched < job.json
job.json: {"hosts": [{"address", "port", "user", "identity_file", "known_hosts"}], "commands": [shell lines],
"script": one shell line running them all, "marker": what the script prints once per finished command}.
Exits non-zero when a command did not finish on a host. Imports nothing from deployctl (a peer stands alone).
"""

from __future__ import annotations

import asyncio
import json
import sys


def finished(output: str, job: dict) -> bool:
    return output.count(f"@@{job['marker']} rc ") == len(job["commands"])


def run_asyncssh(job: dict, batched: bool) -> None:
    """One connection per host (host key checked against known_hosts); the commands in turn, or the one script."""
    import asyncssh

    async def one(host):
        async with asyncssh.connect(host["address"], port=host["port"], username=host["user"],
                                    client_keys=[host["identity_file"]], known_hosts=host["known_hosts"],
                                    agent_path=None) as conn:
            if batched:
                result = await conn.run(job["script"], check=False)
                return finished(result.stdout, job)
            return all([(await conn.run(c, check=False)).exit_status is not None for c in job["commands"]])

    async def everyone():
        return await asyncio.gather(*(one(h) for h in job["hosts"]))

    if not all(asyncio.run(everyone())):
        raise SystemExit("asyncssh: a command did not finish")


def run_pssh(job: dict, batched: bool) -> None:
    """ParallelSSHClient (libssh2, no host-key check): each command on all hosts at once, or the one script."""
    from pssh.clients import ParallelSSHClient

    hosts = job["hosts"]
    client = ParallelSSHClient([h["address"] for h in hosts], user=hosts[0]["user"], port=hosts[0]["port"],
                               pkey=hosts[0]["identity_file"], pool_size=len(hosts), num_retries=1, timeout=30)
    for command in [job["script"]] if batched else job["commands"]:
        output = client.run_command(command, stop_on_errors=True)
        client.join(output)
        for host_output in output:
            text = "\n".join(host_output.stdout)
            if host_output.exit_code is None or (batched and not finished(text + "\n", job)):
                raise SystemExit(f"parallel-ssh: {command[:60]!r} did not finish on {host_output.host}")


def main() -> None:
    library, mode = sys.argv[1:3]
    job = json.load(sys.stdin)
    {"asyncssh": run_asyncssh, "pssh": run_pssh}[library](job, mode == "batched")


if __name__ == "__main__":
    main()
