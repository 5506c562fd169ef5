"""The test bed as a whole: bring N hosts + S3 + images up, tear everything down, inspect it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.testbed import hosts, images, layout, profile, s3
from tests.testbed.hosts import TestHost
from tests.testbed.s3 import S3Endpoint

APT_PACKAGES = ("docker.io", "openssh-server", "busybox-static", "iproute2", "curl", "procps")
NEEDED_BINARIES = {"dockerd": "docker.io", "containerd": "docker.io", "runc": "docker.io",
                   "/usr/sbin/sshd": "openssh-server", "busybox": "busybox-static", "ip": "iproute2",
                   "curl": "curl", "sysctl": "procps"}


class TestbedError(RuntimeError):
    """The test bed cannot be brought up here; the message says why."""


def missing_packages() -> list:
    return sorted({pkg for binary, pkg in NEEDED_BINARIES.items() if not shutil.which(binary)})


def install_packages() -> None:
    """apt-get what the bed needs when something is missing (a fresh CI machine)."""
    if not missing_packages():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES],
                   check=True, env=env, capture_output=True)
    if missing_packages():
        raise TestbedError(f"still missing after apt-get install: {', '.join(missing_packages())}")


def preflight() -> None:
    if os.geteuid() != 0:
        raise TestbedError("the test bed needs root (network namespaces, mounts, dockerd)")


class Testbed:
    """A running (or to-be-started) test bed; state lives under layout.state_dir()."""

    __test__ = False

    def __init__(self, n_hosts: int | None = None) -> None:
        self.root = layout.state_dir()
        if n_hosts is None:
            n_hosts = self._recorded_hosts()
        self.hosts = [hosts.describe(i) for i in range(1, n_hosts + 1)]
        self.base_image = layout.BASE_IMAGE
        self.standin_image = layout.STANDIN_IMAGE
        self.timings: dict = {}
        self._wanted = None  # Future of {image: hash}, computed while the hosts come up

    # -- lifecycle ---------------------------------------------------------------------------

    def up(self, n_hosts: int | None = None, *, with_images: bool = True) -> "Testbed":
        """Remove leftovers, then bring up hosts (parallel), S3 and images; idempotent per call."""
        preflight()
        started = time.monotonic()
        install_packages()
        self.timings["install"] = time.monotonic() - started
        if n_hosts is not None:
            self.hosts = [hosts.describe(i) for i in range(1, n_hosts + 1)]
        hashing = ThreadPoolExecutor(max_workers=1)
        self._wanted = hashing.submit(images.wanted_hashes) if with_images else None
        hashing.shutdown(wait=False)
        cleanup_leftovers()
        mark = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "bed.json").write_text(json.dumps({"hosts": len(self.hosts)}) + "\n")
        self._client_keys()
        hosts.ensure_bridge()
        weed = s3.start()  # starts on the bridge address while the hosts come up
        with ThreadPoolExecutor(max_workers=max(1, len(self.hosts))) as pool:
            list(pool.map(self._host_up, self.hosts))
        self.timings["hosts"] = time.monotonic() - mark
        mark = time.monotonic()
        s3.wait_ready(s3.read_endpoint(), weed)
        self.timings["s3"] = time.monotonic() - mark
        if with_images:
            mark = time.monotonic()
            self.load_images()
            self.timings["images"] = time.monotonic() - mark
        self.timings["total"] = time.monotonic() - started
        return self

    def down(self) -> float:
        """Stop everything and remove all state; returns seconds taken."""
        started = time.monotonic()
        cleanup_leftovers()
        return time.monotonic() - started

    def load_images(self) -> None:
        """Build on the first engine and ship to the others what the cache did not already seed."""
        wanted = self._wanted.result() if self._wanted else images.wanted_hashes()
        first = self.hosts[0].docker_socket
        needy = images.lacking([h.docker_socket for h in self.hosts], wanted)
        if not needy:
            return
        images.build_on(first, wanted)
        images.ship(first, [s for s in needy if s != first], wanted)
        # An engine that only `docker load` wrote (not the builder) becomes the cache for the next bed.
        loaded = [h for h in self.hosts[1:] if h.docker_socket in needy]
        if loaded:
            images.save_engine(loaded[0].docker_data, images.engine_key(wanted))

    def _client_keys(self) -> None:
        ssh = layout.ssh_dir()
        ssh.mkdir(parents=True, exist_ok=True)
        public = hosts.generate_keypair(ssh / "id_ed25519", "deployctl-testbed-client")
        (ssh / "authorized_keys").write_text(public + "\n")

    def _host_up(self, host: TestHost) -> None:
        host.dir.mkdir(parents=True, exist_ok=True)
        host_public = hosts.generate_keypair(host.dir / "ssh_host_ed25519_key", host.name)
        with open(host.known_hosts, "a") as known:  # appends of one short line are atomic
            known.write(f"{host.address} {host_public}\n")
        hosts.start_namespace(host)
        root = hosts.root_of(host)
        profile.install_tools(root)
        self.reset_profile(host.name)
        self._write_etc_hosts(root)
        hosts.start_sshd(host)
        if self._wanted is not None:  # before dockerd starts: it reads its image store only then
            images.seed_engine(host.docker_data, images.engine_key(self._wanted.result()))
        hosts.start_dockerd(host)
        hosts.wait_ready(host)

    def _write_etc_hosts(self, root: Path) -> None:
        lines = ["127.0.0.1 localhost"] + [f"{h.address} {h.name}" for h in self.hosts]
        (root / "etc/hosts").write_text("\n".join(lines) + "\n")

    def _recorded_hosts(self) -> int:
        try:
            return int(json.loads((self.root / "bed.json").read_text())["hosts"])
        except (OSError, ValueError, KeyError):
            return int(os.environ.get("DEPLOYCTL_TESTBED_HOSTS", layout.DEFAULT_HOSTS))

    # -- what tests use ----------------------------------------------------------------------

    @property
    def s3(self) -> S3Endpoint:
        return s3.read_endpoint()

    def host(self, name: str) -> TestHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no test host {name!r} (have {', '.join(h.name for h in self.hosts)})")

    def run_on(self, host_name: str, argv, check: bool = True, input: str | bytes | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
        """Run argv inside the host's namespaces (not over SSH): for set-up and assertions."""
        host = self.host(host_name)
        env = {**os.environ, "DOCKER_HOST": f"unix://{host.docker_socket}"}
        return subprocess.run(hosts.nsenter_argv(host) + list(argv), check=check, capture_output=True,
                              text=not isinstance(input, bytes), input=input, env=env, timeout=timeout)

    def docker_on(self, host_name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """`docker ARGS` against the host's own engine, run inside the host."""
        return self.run_on(host_name, [images.docker_cli(), *args], check=check)

    def profile(self, host_name: str) -> dict:
        return json.loads((hosts.root_of(self.host(host_name)) / "etc/deployctl-fake/profile.json").read_text())

    def set_profile(self, host_name: str, **changes) -> dict:
        """Change a host's emulated NPUs (cards, health, driver, device_ips, ...); returns the new profile."""
        host = self.host(host_name)
        updated = profile.changed(self.profile(host_name), changes)
        profile.apply_profile(hosts.root_of(host), updated)
        return updated

    def reset_profile(self, host_name: str) -> dict:
        host = self.host(host_name)
        default = profile.default_profile(host.index)
        profile.apply_profile(hosts.root_of(host), default)
        return default

    def set_tuning(self, host_name: str, **values) -> None:
        """The host's own swappiness, numa_balancing and CPU governors (tests/testbed/tuning.py)."""
        from tests.testbed.tuning import set_tuning

        set_tuning(self, host_name, **values)

    def set_ip_forward(self, host_name: str, value: int) -> None:
        self.run_on(host_name, ["sysctl", "-qw", f"net.ipv4.ip_forward={value}"])

    def stop_dockerd(self, host_name: str, timeout: float = 20) -> None:
        """Stop one host's Docker daemon (SIGTERM, as systemctl stop does); its socket stops answering."""
        host = self.host(host_name)
        pid = int((host.dir / "dockerd.pid").read_text())
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def start_dockerd(self, host_name: str) -> None:
        """Start one host's Docker daemon again and wait until it answers."""
        host = self.host(host_name)
        hosts.start_dockerd(host)
        hosts.wait_ready(host)

    def set_gpu_profile(self, host_name: str, **changes) -> dict:
        """Make a host an NVIDIA GPU host: no NPUs, fake nvidia-smi, and (unless nvidia_runtime=False) dockerd
        restarted with an `nvidia` runtime and the prestart hook `--gpus` needs. Undo with reset_gpu()."""
        host = self.host(host_name)
        root = hosts.root_of(host)
        updated = profile.gpu_profile(profile.default_profile(host.index), changes)
        profile.apply_profile(root, updated)
        runtime = bool(updated["nvidia_runtime"])
        profile.install_gpu_tools(root, runtime)
        self._restart_dockerd(host, ("--add-runtime", "nvidia=runc") if runtime else ())
        return updated

    def reset_gpu(self, host_name: str) -> dict:
        """Back to the default Ascend host: GPU tools removed, dockerd without the nvidia runtime."""
        host = self.host(host_name)
        root = hosts.root_of(host)
        profile.remove_gpu_tools(root)
        default = self.reset_profile(host_name)
        self._restart_dockerd(host, ())
        return default

    def use_dockerd(self, host_name: str, binary: str | None) -> None:
        """Run another dockerd on the host (e.g. newer_docker.ensure_dockerd()), on an empty image store of its
        own so the bed's engine cache is never opened by it; None: back to the bed's own, store and all."""
        host = self.host(host_name)
        other = host.dir / "docker-other"
        if binary is None:
            self._restart_dockerd(host, ())
            shutil.rmtree(other, ignore_errors=True)
            return
        shutil.rmtree(other, ignore_errors=True)
        other.mkdir(parents=True)
        self._restart_dockerd(host, (), binary, other)

    def _restart_dockerd(self, host: TestHost, extra_args: tuple, binary: str = "dockerd",
                         data_root: Path | None = None) -> None:
        # dockerd looks for the nvidia hook and reads its runtimes only at start.
        pid_file = host.dir / "dockerd.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        hosts.start_dockerd(host, extra_args, binary, data_root)
        hosts.wait_ready(host)

    def calls(self, host_name: str) -> list:
        """Every fake-tool call on the host so far: [{"tool", "argv", ...}]."""
        path = self.host(host_name).calls_log
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def ssh_section(self) -> str:
        """The `ssh:` block of a spec that reaches the test bed's hosts."""
        first = self.hosts[0]
        return (
            "ssh:\n  user: root\n  port: 22\n"
            f"  identity_file: {first.identity_file}\n  known_hosts: {first.known_hosts}\n"
        )

    def hosts_section(self, names=None) -> str:
        """The `hosts:` block naming test hosts by their own names (tb1, tb2, ...)."""
        chosen = [h for h in self.hosts if names is None or h.name in names]
        return "hosts:\n" + "".join(f"  {h.name}: {{address: {h.address}}}\n" for h in chosen)

    def spec_yaml(self, name: str, topology_yaml: str, *, hosts_used=None, extra: str = "") -> str:
        """A whole spec for the test bed: version, name, ssh, hosts, then the caller's topology/extra."""
        return f"version: 1\nname: {name}\n{self.ssh_section()}{self.hosts_section(hosts_used)}{extra}{topology_yaml}"

    def status(self) -> dict:
        """Which parts answer right now (for `python -m tests.testbed status`)."""
        report = {"state_dir": str(self.root), "hosts": {}, "s3": None}
        for host in self.hosts:
            if not (host.dir / "anchor.pid").exists():
                report["hosts"][host.name] = "down"
                continue
            ssh_ok = hosts._tcp_open(host.address, 22)
            docker_ok = hosts._docker_pings(host.docker_socket)
            report["hosts"][host.name] = f"{host.address} sshd={'up' if ssh_ok else 'down'} " \
                                         f"dockerd={'up' if docker_ok else 'down'}"
        if (s3.s3_dir() / "credentials").exists():
            report["s3"] = f"{layout.S3_ENDPOINT} bucket={layout.S3_BUCKET} " + (
                "up" if hosts._tcp_open(layout.BRIDGE_ADDRESS, layout.S3_PORT) else "down")
        return report


def cleanup_leftovers() -> None:
    """Remove everything a test bed (this one or an earlier, crashed run) left: processes, netns, bridge, files."""
    root = layout.state_dir()
    # weed gets TERM, then SIGKILL after 3 s (its filer shutdown often hangs): meanwhile tear down the rest.
    weed = threading.Thread(target=s3.stop)
    weed.start()
    namespaces = [n for n in _listdir("/run/netns") if n.startswith(layout.NETNS_PREFIX)]
    inodes = {hosts.namespace_inode(f"/run/netns/{n}") for n in namespaces} - {None}
    _kill_cgroups()
    for _ in range(3):  # daemons may fork while we kill; repeat until the namespaces are empty
        if not hosts.kill_namespace_members(inodes):
            break
        time.sleep(0.05)
    _kill_pid_files(root)
    for name in namespaces:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    _remove_cgroups()
    for link in hosts.links():
        if link.startswith("dctlv") or link == layout.BRIDGE:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
    weed.join()
    _unmount_under(root)
    shutil.rmtree(root, ignore_errors=True)
    if [n for n in _listdir("/run/netns") if n.startswith("dctl")]:
        return  # another bed's hosts mount these: removing one here would detach it there
    for mount_point in ("/var/lib/deployctl", "/var/log/npu"):
        try:
            os.rmdir(mount_point)  # only the empty mount points the bed created
        except OSError:
            pass


def _listdir(path: str) -> list:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _cgroup_dirs() -> list:
    found = []
    for controller in _listdir("/sys/fs/cgroup"):
        base = Path("/sys/fs/cgroup", controller)
        found += [base / d for d in _listdir(str(base)) if d.startswith(layout.CGROUP_PREFIX)]
    return found


def _kill_cgroups() -> None:
    # Containers of the hosts' engines live in cgroups /dctl-tbN/<id> (dockerd --cgroup-parent).
    for top in _cgroup_dirs():
        for dirpath, _, filenames in os.walk(top):
            if "cgroup.procs" in filenames:
                for pid in Path(dirpath, "cgroup.procs").read_text().split():
                    _signal(int(pid), signal.SIGKILL)


def _remove_cgroups() -> None:
    for top in _cgroup_dirs():
        for dirpath, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            for _ in range(20):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)  # processes killed a moment ago are still being reaped


def _kill_pid_files(root: Path) -> None:
    if not root.exists():
        return
    for pid_file in root.rglob("*.pid"):
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if started_by_bed(pid, root):
            _signal(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by its Popen counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def started_by_bed(pid: int, root: Path) -> bool:
    """True when the process names the state dir on its command line (a stale pid file may point elsewhere)."""
    try:
        return f"{root}/".encode() in Path(f"/proc/{pid}/cmdline").read_bytes()  # not a second bed's root-2/
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _unmount_under(root: Path) -> None:
    prefix = str(root) + "/"
    with open("/proc/self/mounts") as mounts:
        targets = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
