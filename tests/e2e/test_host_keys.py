"""Host keys through the CLI on the test bed: a changed key is refused, an unknown key needs
--accept-new-host-keys, and the known_hosts line deployctl writes is one OpenSSH trusts (issue 19 item 5)."""

from __future__ import annotations

import subprocess

from tests.e2e.conftest import MODEL, container_ids

MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb3, devices: [6, 7], port: 8595}\n"
NAME = "e2e-hostkey"


def spec(bed, known_hosts) -> str:
    text = bed.spec_yaml(NAME, MIXED, hosts_used=["tb3"], extra=MODEL)
    return text.replace(f"known_hosts: {bed.hosts[0].known_hosts}", f"known_hosts: {known_hosts}")


def tb3(bed):
    return next(h for h in bed.hosts if h.name == "tb3")


def fingerprint_of(line: str, tmp_path) -> str:
    """OpenSSH's own SHA256 fingerprint of a known_hosts line."""
    path = tmp_path / "one-key"
    path.write_text(line + "\n")
    return subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)], check=True, capture_output=True,
                          text=True).stdout.split()[1]


def real_key_line(bed) -> str:
    host = tb3(bed)
    lines = [line for line in open(host.known_hosts).read().splitlines() if line.split()[0] == host.address]
    assert len(lines) == 1
    return lines[0]


def nothing_deployed(bed) -> bool:
    state = bed.run_on("tb3", ["ls", "/var/lib/deployctl"], check=False).stdout.split()
    return NAME not in state and container_ids(bed, "tb3", NAME) == {}


def test_a_changed_host_key_is_refused_naming_host_and_fingerprints(bed, deployctl, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")], check=True)
    kind, blob = open(tmp_path / "impostor.pub").read().split()[:2]
    address = tb3(bed).address
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{address} {kind} {blob}\n")
    before = known_hosts.read_text()
    path = deployctl.write(spec(bed, known_hosts))
    code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
    assert code == 1, err
    real = fingerprint_of(real_key_line(bed), tmp_path)
    wrong = fingerprint_of(f"{address} {kind} {blob}", tmp_path)
    assert f"error: tb3 ({address}): host key CHANGED: got ssh-ed25519 {real}, known_hosts has {wrong}" in err
    assert f"hint: if the host was reinstalled, remove its old line: ssh-keygen -R {address}" in err
    assert known_hosts.read_text() == before  # never replaced, not even with --accept-new-host-keys
    code, _, err = deployctl("up", path, "--skip", "weights", "--yes", "--accept-new-host-keys")
    assert code == 1 and "host key CHANGED" in err and known_hosts.read_text() == before
    assert nothing_deployed(bed)


def test_an_unknown_host_key_is_refused_with_the_keyscan_hint(bed, deployctl, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    address = tb3(bed).address
    path = deployctl.write(spec(bed, known_hosts))
    code, out, err = deployctl("status", path)
    assert code == 1, err
    real = fingerprint_of(real_key_line(bed), tmp_path)
    assert f"error: tb3 ({address}): unknown host key ssh-ed25519 {real} (not in {known_hosts})" in err
    assert (f"hint: check the fingerprint with the host's owner, then trust it: ssh-keyscan -p 22 -t ed25519 "
            f"{address} >> {known_hosts}   (or re-run with --accept-new-host-keys)") in " ".join(err.split("\n  "))
    assert known_hosts.read_text() == ""


def test_accept_new_host_keys_writes_a_line_openssh_trusts(bed, deployctl, tmp_path):
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    host = tb3(bed)
    path = deployctl.write(spec(bed, known_hosts))
    code, out, err = deployctl("status", path, "--accept-new-host-keys")
    assert code == 3 and f"{NAME}: not deployed" in out, err  # connected: it could tell nothing is deployed
    address, kind, blob = real_key_line(bed).split()[:3]
    assert known_hosts.read_text() == f"{address} {kind} {blob}\n"  # the host's real key, OpenSSH's format
    # OpenSSH itself, strict, reading only what deployctl wrote
    ssh = subprocess.run(["ssh", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
                          "-o", "GlobalKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-F", "/dev/null",
                          "-i", host.identity_file, "-p", "22", f"root@{host.address}", "true"],
                         capture_output=True, text=True, timeout=60)
    assert ssh.returncode == 0, ssh.stderr
    # the next run needs no flag: the key is known now
    code, out, err = deployctl("status", path)
    assert code == 3 and f"{NAME}: not deployed" in out, err
    assert known_hosts.read_text().count("\n") == 1
