"""`deployctl doctor` on N hosts vs 1 host, beside the same commands run by ansible-core (forks = hosts) and by
the SSH libraries asyncssh (known_hosts checked) and parallel-ssh (libssh2; it has no host-key checking).

Same work for every tool: each is timed as a whole process (interpreter start, imports, connections, commands,
exit), and runs the 11 commands doctor runs on a host of the spec (its 10 probes and the weights-manifest read,
in one batch). The peers run them both per command (11 round trips per host) and batched (all 11 in one remote
script per host, one round trip: doctor's own batch script framing, so the bytes on the wire match).

Run as root, inside the bed lock (the script does not take it: flock(1) already holds it):
    flock /tmp/dctl-bed.lock python -m benchmarks.doctor_fanout [--hosts 32] [--rounds 3]
Installs the peers from benchmarks/requirements-peers.txt with pip when missing. Prints one table (tool, mode,
hosts, median seconds, median client CPU seconds), the ratios, and every round.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from deployctl.batch import batch_script
from deployctl.doctor.gather import doctor_probes
from deployctl.doctor.targets import plan_for_spec
from deployctl.core import Command
from deployctl.spec.load import load_spec
from tests.testbed import Testbed

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-peers.txt"
WEIGHTS_DEST = "/srv/weights/tiny"
DOCTOR_TARGET_S = 1.9  # doctor on 32 hosts, whole process
SPEC_EXTRA = (
    "requirements: {driver: '23.0.6', cards: 8, npu_memory_gb: 64, ip_forward: true, free_disk_gb: 1}\n"
    "image: {name: deployctl/standin-vllm:latest}\n"
    f"weights: {{source: 's3://models/tiny/', dest: {WEIGHTS_DEST}}}\n"
    "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
)


def ensure_peers() -> str:
    """pip-installs the peers (ansible-core, asyncssh, parallel-ssh) when one is missing; returns ansible-playbook."""
    import importlib.util

    binary = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    if not (Path(binary).exists() and importlib.util.find_spec("asyncssh") and importlib.util.find_spec("pssh")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
        binary = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    return binary


def write_spec(bed, work: Path, hosts) -> Path:
    """One mixed instance on NPU 0 of each host: doctor checks every host, with the same probes on each."""
    topology = "topology:\n  mode: mixed\n  instances:\n" + "".join(
        f"    - {{host: {h.name}, devices: [0], port: 8380}}\n" for h in hosts)
    path = work / f"doctor-{len(hosts)}.yaml"
    path.write_text(bed.spec_yaml(f"fanout{len(hosts)}", topology, hosts_used=[h.name for h in hosts],
                                  extra=SPEC_EXTRA))
    return path


class Work:
    """What every tool runs on each host: doctor's argvs, as shell lines and as doctor's one batch script."""

    def __init__(self, spec_path: Path) -> None:
        plan = plan_for_spec(load_spec(str(spec_path)))
        argvs = [p.argv for p in doctor_probes(plan, plan.targets[0])]  # the weights manifest read included
        self.lines = [shlex.join(argv) for argv in argvs]
        self.marker = uuid.uuid4().hex[:10]
        self.script = shlex.join(["sh", "-c", batch_script([Command(a) for a in argvs], self.marker)])


def timed(argv, *, stdin: str | None = None, env=None, cwd=None) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the process and the children it waited for, result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, cwd=cwd)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), result


DOCTOR_FAILS: set = set()  # checks that FAILed (the work is the same; shown so a sick bed is noticed)


def run_doctor(spec_path: Path, hosts, env=None) -> tuple[float, float]:
    """`env`: deployctl of another revision (its worktree on PYTHONPATH); run outside the checkout, whose
    deployctl/ `python -m` would import first."""
    elapsed, cpu, result = timed([sys.executable, "-m", "deployctl", "doctor", str(spec_path), "-o", "json"],
                                 env=env, cwd=spec_path.parent)
    if result.returncode not in (0, 3):
        raise SystemExit(f"deployctl doctor exited {result.returncode}:\n{result.stderr[-2000:]}")
    document = json.loads(result.stdout)
    DOCTOR_FAILS.update(f"{h['host']}:{c['name']}" for h in document["hosts"] for c in h["checks"]
                        if c["status"] == "FAIL")
    reached = [h["host"] for h in document["hosts"] if h["reachable"]]
    if len(reached) != len(hosts):
        raise SystemExit(f"doctor reached only {reached}")
    return elapsed, cpu


def run_library(library: str, batched: bool, work: Work, hosts) -> tuple[float, float]:
    job = {"hosts": [{"address": h.address, "port": h.port, "user": h.user, "identity_file": h.identity_file,
                      "known_hosts": h.known_hosts} for h in hosts],
           "commands": work.lines, "script": work.script, "marker": work.marker}
    elapsed, cpu, result = timed([sys.executable, str(HERE / "fanout_peers.py"), library,
                                  "batched" if batched else "per-command"], stdin=json.dumps(job))
    if result.returncode != 0:
        raise SystemExit(f"{library} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return elapsed, cpu


def playbook(work: Work, batched: bool) -> str:
    """!unsafe keeps Jinja away from `{{json .}}`; JSON strings are YAML double-quoted scalars."""
    if batched:
        return ("- hosts: bed\n  gather_facts: false\n  tasks:\n    - name: doctor batch\n"
                f"      ansible.builtin.shell: !unsafe {json.dumps(work.script)}\n      register: out\n"
                f"      changed_when: false\n"
                f"      failed_when: out.stdout.count('@@{work.marker} rc ') != {len(work.lines)}\n")
    tasks = "".join(f"    - name: {json.dumps(line[:40])}\n      ansible.builtin.shell: !unsafe {json.dumps(line)}\n"
                    "      changed_when: false\n      failed_when: false\n" for line in work.lines)
    return f"- hosts: bed\n  gather_facts: false\n  tasks:\n{tasks}"


def inventory(hosts) -> str:
    first = hosts[0]
    lines = ["[bed]"] + [f"{h.name} ansible_host={h.address}" for h in hosts]
    lines += ["[bed:vars]", f"ansible_user={first.user}", f"ansible_ssh_private_key_file={first.identity_file}",
              f"ansible_ssh_common_args='-o UserKnownHostsFile={first.known_hosts} -o StrictHostKeyChecking=yes'",
              "ansible_python_interpreter=/usr/bin/python3"]
    return "\n".join(lines) + "\n"


def run_ansible(binary: str, tmp: Path, work: Work, batched: bool, hosts) -> tuple[float, float]:
    """A fresh ControlPath dir per run: ansible's ControlPersist masters must not carry a connection into the
    next timed run (they are closed after the timing)."""
    run_dir = Path(tempfile.mkdtemp(prefix="ansible-", dir=tmp))
    (run_dir / "inventory.ini").write_text(inventory(hosts))
    env = {**os.environ, "ANSIBLE_FORKS": str(len(hosts)), "ANSIBLE_PIPELINING": "True",
           "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_LOCAL_TEMP": str(run_dir / "tmp"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(run_dir / "cp"), "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_NOCOLOR": "1"}
    book = tmp / ("batched.yml" if batched else "per-command.yml")
    elapsed, cpu, result = timed([binary, "-i", str(run_dir / "inventory.ini"), str(book)], env=env)
    for socket in (run_dir / "cp").glob("*") if (run_dir / "cp").is_dir() else ():
        subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "bed"], capture_output=True)
    tasks = 1 if batched else len(work.lines)
    if result.returncode != 0 or result.stdout.count(f"ok={tasks} ") != len(hosts):
        raise SystemExit(f"ansible-playbook failed:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    return elapsed, cpu



def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", metavar="REV", help="also time deployctl doctor at this git revision")
    parser.add_argument("--only-deployctl", action="store_true", help="leave the peers out (quicker)")
    args = parser.parse_args()
    binary = ensure_peers()
    mark = time.monotonic()
    bed = Testbed(args.hosts).up(args.hosts, with_images=False)
    print(f"test bed: {args.hosts} hosts up in {time.monotonic() - mark:.1f} s", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="doctor-fanout-"))
    try:
        n = args.hosts
        one, many = bed.hosts[:1], bed.hosts
        specs = {1: write_spec(bed, tmp, one), n: write_spec(bed, tmp, many)}
        work = Work(specs[n])
        for batched in (False, True):
            (tmp / ("batched.yml" if batched else "per-command.yml")).write_text(playbook(work, batched))
        runners = {
            ("deployctl doctor", "batched"): lambda size, hs: run_doctor(specs[size], hs),
        }
        if args.baseline:
            subprocess.run(["git", "-C", str(HERE.parent), "worktree", "add", "--detach", str(tmp / "baseline"),
                            args.baseline], check=True, capture_output=True)
            env = {**os.environ, "PYTHONPATH": str(tmp / "baseline")}
            runners[(f"doctor @{args.baseline}", "batched")] = lambda size, hs: run_doctor(specs[size], hs, env)
        peers = {
            ("ansible-core", "per-command"): lambda size, hs: run_ansible(binary, tmp, work, False, hs),
            ("ansible-core", "batched"): lambda size, hs: run_ansible(binary, tmp, work, True, hs),
            ("asyncssh", "per-command"): lambda size, hs: run_library("asyncssh", False, work, hs),
            ("asyncssh", "batched"): lambda size, hs: run_library("asyncssh", True, work, hs),
            ("parallel-ssh", "per-command"): lambda size, hs: run_library("pssh", False, work, hs),
            ("parallel-ssh", "batched"): lambda size, hs: run_library("pssh", True, work, hs),
        }
        if not args.only_deployctl:
            runners.update(peers)
        for runner in runners.values():  # warm the page cache (interpreters, libraries, ssh)
            runner(1, one)
        seconds = {(key, size): [] for key in runners for size in (1, n)}
        cpu = {(key, size): [] for key in runners for size in (1, n)}
        order = list(runners)
        for round_index in range(args.rounds):
            shift = round_index % len(order)  # rotate so that no tool always runs right after another
            for key in order[shift:] + order[:shift]:
                for size, hs in ((1, one), (n, many)):
                    wall, used = runners[key](size, hs)
                    seconds[(key, size)].append(wall)
                    cpu[(key, size)].append(used)
        median = {k: statistics.median(v) for k, v in seconds.items()}
        print(f"\n{len(work.lines)} commands per host; whole processes; median of {args.rounds} round(s); "
              f"CPU = the tool's process and the children it waited for")
        print(f"{'tool':<18} {'mode':<12} {'hosts':>5} {'seconds':>8} {'CPU s':>7}")
        for key in runners:
            for size in (1, n):
                print(f"{key[0]:<18} {key[1]:<12} {size:>5} {median[(key, size)]:>8.2f} "
                      f"{statistics.median(cpu[(key, size)]):>7.2f}")
        doctor = median[(("deployctl doctor", "batched"), n)]
        print(f"\ndeployctl doctor: {n} hosts / 1 host = {doctor / median[(('deployctl doctor', 'batched'), 1)]:.2f}x"
              " (target <= 1.5x)")
        print(f"deployctl doctor, {n} hosts: {doctor:.2f} s (target <= {DOCTOR_TARGET_S} s) "
              f"{'PASS' if doctor <= DOCTOR_TARGET_S else 'FAIL'}")
        for tool in [t for t in ("ansible-core", "asyncssh", "parallel-ssh") if not args.only_deployctl]:
            best_mode = min(("per-command", "batched"), key=lambda mode: median[((tool, mode), n)])
            peer = median[((tool, best_mode), n)]
            verdict = f"doctor {peer / doctor:.2f}x faster" if peer >= doctor else f"doctor {doctor / peer:.2f}x slower"
            print(f"{n} hosts: doctor {doctor:.2f} s vs {tool} ({best_mode}, its faster mode) {peer:.2f} s: {verdict}")
        if DOCTOR_FAILS:
            print(f"note: doctor reported FAIL for {sorted(DOCTOR_FAILS)}")
        print("all rounds (s): " + "; ".join(f"{k[0]} {k[1]} {size}={[round(v, 2) for v in values]}"
                                             for (k, size), values in seconds.items()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(HERE.parent), "worktree", "prune"], capture_output=True)
        bed.down()


if __name__ == "__main__":
    main()
