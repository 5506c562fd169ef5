"""One emulated host: a network namespace on the bridge with its own mounts, sshd and dockerd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.testbed import layout

INIT_SCRIPT = """set -e
HD={hd}
ip link set lo up
ip addr add {address}/{prefix} dev {nic}
ip link set {nic} up
echo 1 > /proc/sys/net/ipv4/ip_forward
hostname {name}
# A fresh sysfs shows this namespace's interfaces; keep the cgroup tree dockerd needs across it.
mkdir -p $HD/mnt/cgroup
mount --rbind /sys/fs/cgroup $HD/mnt/cgroup
mount -t sysfs sysfs /sys
mount --move $HD/mnt/cgroup /sys/fs/cgroup
# Copy-on-write views: fake tools, /etc and /opt changes stay on this host.
for d in usr/local etc opt; do
  n=$(echo $d | tr / _)
  mkdir -p $HD/ov/$n/upper $HD/ov/$n/work
  mount -t overlay overlay -o lowerdir=/$d,upperdir=$HD/ov/$n/upper,workdir=$HD/ov/$n/work /$d
done
echo {name} > /etc/hostname
# A private /dev: the basic nodes plus this host's NPU nodes (added by the test bed).
mount -t tmpfs -o mode=755,size=16m dev-{name} /dev
mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/tty c 5 0
mkdir /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts
ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o mode=1777 shm /dev/shm
ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
# Host-local storage and deployctl's per-host state (lock, history) must not be shared.
mkdir -p /srv /var/lib/deployctl /var/log/npu $HD/srv $HD/var-lib-deployctl $HD/var-log-npu
mount --bind $HD/srv /srv
mount --bind $HD/var-lib-deployctl /var/lib/deployctl
mount --bind $HD/var-log-npu /var/log/npu
# Its own (empty) home: this machine's ~/.bashrc (pyenv, cargo) must not run on every SSH command.
mkdir -p $HD/root
mount --bind $HD/root /root
touch $HD/mounted
exec sleep infinity
"""

SSHD_CONFIG = """ListenAddress {address}
Port 22
HostKey {hd}/ssh_host_ed25519_key
PidFile {hd}/sshd.pid
AuthorizedKeysFile {authorized_keys}
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PrintMotd no
Subsystem sftp internal-sftp
SetEnv DOCKER_HOST=unix://{hd}/docker/docker.sock FAKE_HOST={name} \
PATH=/usr/local/Ascend/driver/tools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"""


@dataclass(frozen=True)
class TestHost:
    """What a test needs to reach host i: name, address, SSH credentials, its state dir."""

    __test__ = False  # not a pytest test class

    index: int
    name: str
    address: str
    user: str
    port: int
    identity_file: str
    known_hosts: str
    dir: Path
    netns: str

    @property
    def docker_socket(self) -> Path:
        return self.dir / "docker" / "docker.sock"

    @property
    def docker_data(self) -> Path:
        """The engine's --data-root."""
        return self.dir / "docker" / "data"

    @property
    def calls_log(self) -> Path:
        return self.dir / "calls.log"


def describe(index: int) -> TestHost:
    ssh = layout.ssh_dir()
    return TestHost(
        index=index,
        name=layout.host_name(index),
        address=layout.host_address(index),
        user="root",
        port=22,
        identity_file=str(ssh / "id_ed25519"),
        known_hosts=str(ssh / "known_hosts"),
        dir=layout.host_dir(index),
        netns=layout.netns_name(index),
    )


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


def links() -> list[str]:
    """This thread's network namespace's interfaces (netlink: /sys/class/net shows the namespace /sys was mounted in,
    not a second bed's own)."""
    out = run(["ip", "-o", "link", "show"]).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2]


def ensure_bridge() -> None:
    if layout.BRIDGE not in links():
        run(["ip", "link", "add", layout.BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{layout.BRIDGE_ADDRESS}/{layout.PREFIX_LEN}", "dev", layout.BRIDGE])
    run(["ip", "link", "set", layout.BRIDGE, "up"])


def generate_keypair(private_path: Path, comment: str) -> str:
    """Write an OpenSSH ed25519 private key; return the public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    private_path.write_bytes(private)
    private_path.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = public.decode() + " " + comment
    private_path.with_name(private_path.name + ".pub").write_text(line + "\n")
    return public.decode()


def start_namespace(host: TestHost) -> subprocess.Popen:
    """Create host's netns + veth and its mount/uts namespace; return the anchor process."""
    for sub in ("docker", "srv/weights"):
        (host.dir / sub).mkdir(parents=True, exist_ok=True)
    veth = layout.veth_name(host.index)
    run(["ip", "netns", "add", host.netns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", layout.nic_name(host.index), "netns", host.netns])
    run(["ip", "link", "set", veth, "master", layout.BRIDGE, "up"])
    script = host.dir / "init.sh"
    script.write_text(
        INIT_SCRIPT.format(hd=host.dir, address=host.address, prefix=layout.PREFIX_LEN, name=host.name,
                           nic=layout.nic_name(host.index))
    )
    log = open(host.dir / "init.log", "wb")
    anchor = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{host.netns}", "unshare", "--mount", "--uts", "--propagation",
         "private", "/bin/sh", str(script)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    log.close()
    (host.dir / "anchor.pid").write_text(f"{anchor.pid}\n")
    deadline = time.monotonic() + 20
    while not (host.dir / "mounted").exists():
        if anchor.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{host.name}: namespace set-up failed: {(host.dir / 'init.log').read_text()}")
        time.sleep(0.01)
    return anchor


def root_of(host: TestHost) -> Path:
    """The host's filesystem as its processes see it (through the anchor's mount namespace)."""
    return Path(f"/proc/{anchor_pid(host)}/root")


def anchor_pid(host: TestHost) -> int:
    return int((host.dir / "anchor.pid").read_text())


def nsenter_argv(host: TestHost) -> list:
    return ["nsenter", "-t", str(anchor_pid(host)), "-m", "-u", "-n", "--"]


def start_daemon(host: TestHost, name: str, argv: list) -> int:
    """Start a long-running process inside the host's namespaces; record its pid."""
    log = open(host.dir / f"{name}.log", "ab")
    env = {**os.environ, "DOCKER_HOST": f"unix://{host.docker_socket}"}
    proc = subprocess.Popen(
        nsenter_argv(host) + argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, env=env,
    )
    log.close()
    (host.dir / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def start_sshd(host: TestHost) -> None:
    config = host.dir / "sshd_config"
    config.write_text(
        SSHD_CONFIG.format(
            address=host.address, hd=host.dir, name=host.name,
            authorized_keys=layout.ssh_dir() / "authorized_keys",
        )
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    start_daemon(host, "sshd", ["/usr/sbin/sshd", "-D", "-f", str(config), "-E", str(host.dir / "sshd.log")])


def start_dockerd(host: TestHost, extra_args: tuple = (), binary: str = "dockerd",
                  data_root: Path | None = None) -> None:
    """extra_args: e.g. `--add-runtime nvidia=runc` for a GPU host (the `nvidia` runtime of its daemon config);
    binary and data_root: another dockerd (newer_docker.py) on an image store of its own."""
    docker = host.dir / "docker"
    start_daemon(host, "dockerd", [
        binary, "--data-root", str(data_root or host.docker_data), "--exec-root", str(docker / "exec"),
        "--pidfile", str(docker / "dockerd.pid"), "-H", f"unix://{host.docker_socket}",
        "--storage-driver", "overlay2", "--iptables=false", "--ip6tables=false",
        # Without --ip-forward=false dockerd sets ip_forward=1 and hides doctor's check.
        "--ip-forward=false", "--bridge=none", "--cgroup-parent", f"/{layout.CGROUP_PREFIX}{host.name}",
        *extra_args,
    ])


def wait_ready(host: TestHost, timeout: float = 30) -> None:
    """Block until the host's sshd accepts TCP and its dockerd answers /_ping."""
    deadline = time.monotonic() + timeout
    while not _tcp_open(host.address, 22):
        _check_deadline(host, deadline, "sshd", "sshd.log")
    while not _docker_pings(host.docker_socket):
        _check_deadline(host, deadline, "dockerd", "dockerd.log")


def _check_deadline(host: TestHost, deadline: float, what: str, log: str) -> None:
    if time.monotonic() > deadline:
        tail = (host.dir / log).read_text()[-2000:] if (host.dir / log).exists() else ""
        raise RuntimeError(f"{host.name}: {what} did not come up:\n{tail}")
    time.sleep(0.02)


def _tcp_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _docker_pings(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1)
            sock.connect(str(path))
            sock.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b" 200 " in sock.recv(256)
    except OSError:
        return False


def namespace_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def kill_namespace_members(net_inodes: set) -> int:
    """SIGKILL every process living in one of the given network namespaces."""
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        if namespace_inode(f"/proc/{entry}/ns/net") in net_inodes:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed
