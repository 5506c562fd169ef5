"""`deployctl doctor` on 32 hosts vs 1 host, beside the same commands run by ansible-core (forks = hosts) and by
the SSH libraries asyncssh (known_hosts checked) and parallel-ssh (libssh2; it has no host-key checking).

Run as root, inside the bed lock (the script does not take it: flock(1) already holds it):
    flock /tmp/dctl-bed.lock python -m benchmarks.doctor_fanout [--hosts 32] [--rounds 3]
Installs ansible-core, asyncssh and parallel-ssh with pip when missing. Prints each figure (median of the rounds),
the ratios, and the CPU seconds deployctl's own process spent on the N-host doctor.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deployctl.commands.doctor import examine
from deployctl.doctor.targets import plan_for_hosts
from deployctl.ui import UI
from tests.testbed import Testbed

# what doctor runs on a host without a spec (facts.probes.probes_for("ascend", (), None)), one task each
COMMANDS = (
    "npu-smi info", "npu-smi info -l", "npu-smi info -t board -i 0", "cat /usr/local/Ascend/driver/version.info",
    "uname -m", "docker version --format '{{ '{{' }}json .{{ '}}' }}'",
    "docker info --format '{{ '{{' }}json .{{ '}}' }}'", "sysctl -n net.ipv4.ip_forward",
    "docker ps --no-trunc --format '{{ '{{' }}json .{{ '}}' }}'", "df -Pk /",
    "/usr/local/Ascend/driver/tools/hccn_tool -i 0 -ip -g",
)


# the same commands without the Jinja escaping ansible needs
RAW_COMMANDS = tuple(c.replace("{{ '{{' }}", "{{").replace("{{ '}}' }}", "}}") for c in COMMANDS)


def ensure_libraries() -> None:
    missing = [pkg for pkg, module in (("asyncssh", "asyncssh"), ("parallel-ssh", "pssh")) if not importlib.util.find_spec(module)]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


def run_asyncssh(hosts) -> float:
    """One connection per host (host key checked against known_hosts), the commands one after another on it."""
    import asyncssh

    async def one(host):
        async with asyncssh.connect(host.address, username="root", client_keys=[host.identity_file],
                                    known_hosts=host.known_hosts, agent_path=None) as conn:
            return [(await conn.run(command, check=False)).exit_status for command in RAW_COMMANDS]

    async def everyone():
        return await asyncio.gather(*(one(h) for h in hosts))

    started = time.monotonic()
    codes = asyncio.run(everyone())
    elapsed = time.monotonic() - started
    if any(code is None for host_codes in codes for code in host_codes):
        raise SystemExit(f"asyncssh: a command did not finish: {codes}")
    return elapsed


def run_pssh(hosts) -> float:
    """ParallelSSHClient (native libssh2 client): each command on all hosts at once, output read, then the next."""
    from pssh.clients import ParallelSSHClient

    started = time.monotonic()
    client = ParallelSSHClient([h.address for h in hosts], user="root", pkey=hosts[0].identity_file,
                               pool_size=len(hosts), num_retries=1, timeout=30)
    for command in RAW_COMMANDS:
        output = client.run_command(command, stop_on_errors=True)
        client.join(output)
        for host_output in output:
            list(host_output.stdout)
            if host_output.exit_code is None:
                raise SystemExit(f"parallel-ssh: {command!r} did not finish on {host_output.host}")
    elapsed = time.monotonic() - started
    del client  # closes the sessions
    return elapsed


def ensure_ansible() -> str:
    found = shutil.which("ansible-playbook")
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ansible-core"], check=True)
        found = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    return found


def playbook() -> str:
    tasks = "".join(
        f"    - name: {command.split(' {{')[0]}\n      ansible.builtin.shell: {command!r}\n"
        "      changed_when: false\n      failed_when: false\n"
        for command in COMMANDS)
    return f"- hosts: bed\n  gather_facts: false\n  tasks:\n{tasks}"


def inventory(hosts) -> str:
    first = hosts[0]
    lines = ["[bed]"] + [f"{h.name} ansible_host={h.address}" for h in hosts]
    lines += ["[bed:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={first.identity_file}",
              f"ansible_ssh_common_args='-o UserKnownHostsFile={first.known_hosts} -o StrictHostKeyChecking=yes'",
              "ansible_python_interpreter=/usr/bin/python3"]
    return "\n".join(lines) + "\n"


def run_ansible(binary: str, work: Path, hosts) -> float:
    (work / "inventory.ini").write_text(inventory(hosts))
    env = {**os.environ, "ANSIBLE_FORKS": str(len(hosts)), "ANSIBLE_PIPELINING": "True",
           "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp"), "ANSIBLE_STDOUT_CALLBACK": "default"}
    started = time.monotonic()
    result = subprocess.run([binary, "-i", str(work / "inventory.ini"), str(work / "doctor.yml")],
                            capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - started
    if result.returncode != 0 or f"ok={len(COMMANDS)}" not in result.stdout:
        raise SystemExit(f"ansible-playbook failed:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    return elapsed


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


CPU_OF_LAST_DOCTOR = [0.0]  # this process's CPU seconds during the last run_doctor


def run_doctor(hosts) -> float:
    first = hosts[0]
    plan = plan_for_hosts(tuple(f"root@{h.address}" for h in hosts), first.identity_file, first.known_hosts)
    started, cpu = time.monotonic(), _cpu()
    reports, _ = examine(plan, UI(output="json", quiet=True))
    elapsed = time.monotonic() - started
    CPU_OF_LAST_DOCTOR[0] = _cpu() - cpu
    unreachable = [r.host for r in reports if not r.reachable]
    if unreachable:
        raise SystemExit(f"doctor could not reach {unreachable}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = ensure_ansible()
    ensure_libraries()
    mark = time.monotonic()
    bed = Testbed(args.hosts).up(args.hosts, with_images=False)
    print(f"test bed: {args.hosts} hosts up in {time.monotonic() - mark:.1f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="doctor-fanout-"))
    try:
        (work / "doctor.yml").write_text(playbook())
        one, many = bed.hosts[:1], bed.hosts
        # warm caches (python imports, ssh binaries)
        run_doctor(one), run_ansible(binary, work, one), run_asyncssh(one), run_pssh(one)
        runners = {"doctor": run_doctor, "ansible": lambda hs: run_ansible(binary, work, hs),
                   "asyncssh": run_asyncssh, "pssh": run_pssh}
        figures = {f"{name}-{size}": [] for name in runners for size in ("1", "N")}
        doctor_cpu = []
        for _ in range(args.rounds):
            for name, runner in runners.items():
                figures[f"{name}-1"].append(runner(one))
                figures[f"{name}-N"].append(runner(many))
                if name == "doctor":
                    doctor_cpu.append(CPU_OF_LAST_DOCTOR[0])
        median = {key: statistics.median(values) for key, values in figures.items()}
        n = args.hosts
        labels = {
            "doctor": "deployctl doctor (one round trip per host)",
            "ansible": f"ansible-core (forks={n}, pipelining, {len(COMMANDS)} shell tasks)",
            "asyncssh": "asyncssh (known_hosts checked, commands in turn on one connection per host)",
            "pssh": "parallel-ssh (libssh2, NO host-key check, each command on all hosts, then the next)",
        }
        for name, label in labels.items():
            one_s, many_s = median[f"{name}-1"], median[f"{name}-N"]
            print(f"{label}: 1 host {one_s:.2f} s, {n} hosts {many_s:.2f} s, ratio {many_s / one_s:.2f}x"
                  + (" (target <= 1.5x)" if name == "doctor" else ""))
        best = min(("asyncssh", "pssh"), key=lambda name: median[f"{name}-N"])
        print(f"deployctl's own CPU on {n} hosts (median): {statistics.median(doctor_cpu):.2f} s")
        print(f"{n} hosts: doctor {median['doctor-N']:.2f} s vs ansible {median['ansible-N']:.2f} s "
              f"({median['ansible-N'] / median['doctor-N']:.1f}x faster), vs the faster library ({best}) "
              f"{median[best + '-N']:.2f} s ({median[best + '-N'] / median['doctor-N']:.1f}x faster)")
        print("all rounds (s): " + ", ".join(f"{k}={[round(v, 2) for v in vals]}" for k, vals in figures.items()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        bed.down()


if __name__ == "__main__":
    main()
