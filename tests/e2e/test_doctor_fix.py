"""`doctor --fix` survives a reboot: both boot loaders (procps `sysctl --system`, systemd-sysctl) replayed on a test
bed host whose sysctl files set net.ipv4.ip_forward=0 where each loader reads them last."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.test_doctor import mixed, write_spec

HOST = "tb3"
OURS = "/etc/sysctl.d/zz-deployctl.conf"
SYSTEMD_SYSCTL = "/lib/systemd/systemd-sysctl"
# What the host holds before the fix (path -> content); sysctl.conf gets a line appended to its own content.
PLANTED = {
    "/etc/sysctl.d/10-early.conf": "net.ipv4.ip_forward = 0\n",  # sorts before ours: left alone
    "/etc/sysctl.d/zzz-late.conf": "vm.swappiness = 10\nnet.ipv4.ip_forward=0\n",  # sorts after ours
    "/usr/local/lib/sysctl.d/zzzz-vendor.conf": "-net/ipv4/ip_forward = 0\n",  # a package's file: overridden
    "/etc/sysctl.d/99-deployctl.conf": "# written by deployctl doctor --fix: old name\nnet.ipv4.ip_forward = 1\n",
}
BACKUPS = ["/etc/sysctl.conf.deployctl.bak", "/etc/sysctl.d/zzz-late.conf.deployctl.bak"]
CREATED = [OURS, "/etc/sysctl.d/zzzz-vendor.conf", *PLANTED, *BACKUPS]

# A reboot, replayed without touching this machine's global sysctls: a fresh network namespace owned by a fresh
# user namespace (only its net.* keys are writable) inside the host's mount namespace, so the loader reads the
# host's files. ip_forward starts at 0, as after a boot, then the loader runs.
REPLAY = 'sysctl -qw net.ipv4.ip_forward=0 && {loader} >/dev/null 2>&1; cat /proc/sys/net/ipv4/ip_forward'

# systemd-sysctl's rules, for machines without it: *.conf from these directories, one file per name (the first
# directory wins), applied in name order, so the last assignment wins; /etc/sysctl.conf is not read directly.
SYSTEMD_REPLAY = r"""
import os
found = {}
for d in ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d"):
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else ():
        if n.endswith(".conf"):
            found.setdefault(n, os.path.join(d, n))
value = "0"
for n in sorted(found):
    for line in open(found[n]):
        line = line.strip()
        if line and line[0] not in "#;" and "=" in line:
            key, _, v = line.lstrip("-").partition("=")
            if key.strip().replace("/", ".") == "net.ipv4.ip_forward":
                value = v.strip()
print(value)
"""


def boot_value(bed, loader: str) -> str:
    if loader == "systemd" and not bed.run_on(HOST, ["test", "-x", SYSTEMD_SYSCTL], check=False).returncode == 0:
        return bed.run_on(HOST, ["python3", "-c", SYSTEMD_REPLAY]).stdout.strip()
    command = "sysctl --system" if loader == "procps" else SYSTEMD_SYSCTL
    out = bed.run_on(HOST, ["unshare", "--user", "--map-root-user", "--net", "sh", "-c",
                            REPLAY.format(loader=command)]).stdout
    return out.strip()


def read(bed, path: str) -> str:
    return bed.run_on(HOST, ["cat", path]).stdout


@pytest.fixture
def hostile_sysctl_files(bed, restore_profiles):
    """Plant the files on HOST's /etc and /usr/local overlays; put back what was there afterwards."""
    assert shutil.which("sysctl"), "procps' sysctl is part of the test bed (bed.NEEDED_BINARIES)"
    original = read(bed, "/etc/sysctl.conf")
    link = bed.run_on(HOST, ["readlink", "/etc/sysctl.d/99-sysctl.conf"], check=False).stdout.strip()
    made_dir = bed.run_on(HOST, ["mkdir", "/usr/local/lib/sysctl.d"], check=False).returncode == 0
    bed.run_on(HOST, ["ln", "-sfn", "../sysctl.conf", "/etc/sysctl.d/99-sysctl.conf"])  # Debian's link
    bed.run_on(HOST, ["tee", "/etc/sysctl.conf"], input=original + "net.ipv4.ip_forward=0\n")
    for path, content in PLANTED.items():
        bed.run_on(HOST, ["tee", path], input=content)
    try:
        yield original
    finally:
        bed.run_on(HOST, ["rm", "-f", *CREATED])
        bed.run_on(HOST, ["tee", "/etc/sysctl.conf"], input=original)
        if made_dir:
            bed.run_on(HOST, ["rmdir", "/usr/local/lib/sysctl.d"])
        if link:
            bed.run_on(HOST, ["ln", "-sfn", link, "/etc/sysctl.d/99-sysctl.conf"])
        else:
            bed.run_on(HOST, ["rm", "-f", "/etc/sysctl.d/99-sysctl.conf"])


def test_fix_wins_under_both_loaders_whatever_the_other_files_say(bed, deployctl, hostile_sysctl_files):
    original = hostile_sysctl_files
    # the planted files do undo a plain fix at boot: both replays end at 0 before deployctl runs
    assert (boot_value(bed, "procps"), boot_value(bed, "systemd")) == ("0", "0")
    bed.set_ip_forward(HOST, 0)
    path = write_spec(bed, deployctl, "doc-boot", mixed(HOST), [HOST])

    code, doc = deployctl.json("doctor", path, "--fix")
    assert code == 0 and doc["ok"] is True
    (fix,) = doc["fixes"]
    assert fix["files"] == [OURS, "/etc/sysctl.d/99-deployctl.conf", "/etc/sysctl.d/zzz-late.conf",
                            "/etc/sysctl.d/zzzz-vendor.conf", "/etc/sysctl.conf"]
    assert fix["actions"][0] == "sysctl -w net.ipv4.ip_forward=1"
    assert "edited /etc/sysctl.conf: net.ipv4.ip_forward was 0, now 1 (backup /etc/sysctl.conf.deployctl.bak)" \
        in fix["actions"]

    # a reboot: each loader, on its own, leaves forwarding on
    assert boot_value(bed, "procps") == "1"
    assert boot_value(bed, "systemd") == "1"

    assert read(bed, OURS).endswith("net.ipv4.ip_forward = 1\n")
    assert read(bed, "/etc/sysctl.conf.deployctl.bak") == original + "net.ipv4.ip_forward=0\n"
    assert read(bed, "/etc/sysctl.conf") == original + (
        "# deployctl doctor --fix (was: net.ipv4.ip_forward=0)\nnet.ipv4.ip_forward = 1\n")
    assert read(bed, "/etc/sysctl.d/zzz-late.conf").startswith("vm.swappiness = 10\n")  # other settings kept
    assert read(bed, "/etc/sysctl.d/zzzz-vendor.conf").endswith("net.ipv4.ip_forward = 1\n")
    assert read(bed, "/usr/local/lib/sysctl.d/zzzz-vendor.conf") == PLANTED["/usr/local/lib/sysctl.d/zzzz-vendor.conf"]
    assert read(bed, "/etc/sysctl.d/10-early.conf") == PLANTED["/etc/sysctl.d/10-early.conf"]  # loses anyway
    assert bed.run_on(HOST, ["readlink", "/etc/sysctl.d/99-sysctl.conf"]).stdout.strip() == "../sysctl.conf"

    # idempotent: with ip_forward 0 again (a host where something else reset it), only `sysctl -w` happens
    bed.set_ip_forward(HOST, 0)
    code, doc = deployctl.json("doctor", path, "--fix")
    assert code == 0 and doc["fixes"][0]["actions"] == ["sysctl -w net.ipv4.ip_forward=1"]
    assert doc["fixes"][0]["files"] == []
