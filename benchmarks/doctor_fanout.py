"""`deployctl doctor` on 32 hosts vs 1 host, beside the same checks as an ansible-core playbook (forks = hosts).

Run as root, inside the bed lock (the script does not take it: flock(1) already holds it):
    flock /tmp/dctl-bed.lock python -m benchmarks.doctor_fanout [--hosts 32] [--rounds 3]
Installs ansible-core with pip when it is missing. Prints each figure (median of the rounds) and the ratios.
"""

from __future__ import annotations

import argparse
import os
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


def run_doctor(hosts) -> float:
    first = hosts[0]
    plan = plan_for_hosts(tuple(f"root@{h.address}" for h in hosts), first.identity_file, first.known_hosts)
    started = time.monotonic()
    reports, _ = examine(plan, UI(output="json", quiet=True))
    elapsed = time.monotonic() - started
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
    mark = time.monotonic()
    bed = Testbed(args.hosts).up(args.hosts, with_images=False)
    print(f"test bed: {args.hosts} hosts up in {time.monotonic() - mark:.1f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="doctor-fanout-"))
    try:
        (work / "doctor.yml").write_text(playbook())
        one, many = bed.hosts[:1], bed.hosts
        run_doctor(one), run_ansible(binary, work, one)  # warm caches (python imports, ssh binaries)
        figures = {key: [] for key in ("doctor-1", "doctor-N", "ansible-1", "ansible-N")}
        for _ in range(args.rounds):
            figures["doctor-1"].append(run_doctor(one))
            figures["doctor-N"].append(run_doctor(many))
            figures["ansible-1"].append(run_ansible(binary, work, one))
            figures["ansible-N"].append(run_ansible(binary, work, many))
        median = {key: statistics.median(values) for key, values in figures.items()}
        n = args.hosts
        print(f"deployctl doctor:   1 host {median['doctor-1']:.2f} s, {n} hosts {median['doctor-N']:.2f} s, "
              f"ratio {median['doctor-N'] / median['doctor-1']:.2f}x (target <= 1.5x)")
        print(f"ansible-core (forks={n}, pipelining, {len(COMMANDS)} shell tasks): 1 host {median['ansible-1']:.2f} s, "
              f"{n} hosts {median['ansible-N']:.2f} s, ratio {median['ansible-N'] / median['ansible-1']:.2f}x")
        print(f"{n} hosts: doctor {median['doctor-N']:.2f} s vs ansible {median['ansible-N']:.2f} s "
              f"({median['ansible-N'] / median['doctor-N']:.1f}x faster)")
        print("all rounds (s): " + ", ".join(f"{k}={[round(v, 2) for v in vals]}" for k, vals in figures.items()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        bed.down()


if __name__ == "__main__":
    main()
