"""`deployctl doctor` (and `up`'s checks) on the test bed: healthy hosts, then each made unhealthy one way."""

from __future__ import annotations

import json
import tarfile

from tests.e2e.conftest import MODEL, container_ids

REQUIREMENTS = "requirements: {driver: '23.0.6', cards: 8, npu_memory_gb: 64, ip_forward: true, free_disk_gb: 1}\n"
ASCEND_CHECKS = ["ssh", "npu_count", "npu_health", "npu_memory", "driver", "firmware", "docker", "ip_forward",
                 "disk", "npu_free"]
SYSCTL_FILE = "/etc/sysctl.d/zz-deployctl.conf"


def mixed(host: str, devices: str = "0, 1", port: int = 8380) -> str:
    return f"topology:\n  mode: mixed\n  instances:\n    - {{host: {host}, devices: [{devices}], port: {port}}}\n"


def pd(prefill: str, decode: str, devices: str = "0, 1") -> str:
    return (f"topology:\n  mode: disaggregated\n  scheduler: {{host: {prefill}, port: 9300}}\n"
            f"  prefill:\n    - {{host: {prefill}, devices: [{devices}], port: 8388}}\n"
            f"  decode:\n    - {{host: {decode}, devices: [{devices}], port: 8389}}\n")


def write_spec(bed, deployctl, name, topology, hosts):
    return deployctl.write(bed.spec_yaml(name, topology, hosts_used=hosts, extra=MODEL + REQUIREMENTS))


def checks(doc, host):
    (entry,) = [h for h in doc["hosts"] if h["host"] == host]
    return entry["checks"]


def statuses(doc, host):
    return [(c["name"], c["status"]) for c in checks(doc, host)]


def failing(doc):
    return [(h["host"], c["name"], c.get("npu")) for h in doc["hosts"] for c in h["checks"] if c["status"] == "FAIL"]


def test_healthy_hosts_pass_with_the_contract_shape(bed, deployctl):
    path = write_spec(bed, deployctl, "doc-ok", mixed("tb1") + "    - {host: tb2, devices: [2, 3], port: 8381}\n",
                      ["tb1", "tb2"])
    code, doc = deployctl.json("doctor", path)
    assert code == 0 and doc["ok"] is True
    assert set(doc) == {"ok", "hosts"}
    assert [(h["host"], h["address"], h["reachable"]) for h in doc["hosts"]] == [
        ("tb1", "10.200.0.11", True), ("tb2", "10.200.0.12", True)]
    for host in ("tb1", "tb2"):
        # the weights were placed by hand, not synced: nothing to compare yet
        assert statuses(doc, host) == [(name, "PASS") for name in ASCEND_CHECKS] + [("weights", "SKIP")] + [
            ("ports", "PASS"), ("ephemeral_ports", "PASS")]
        for check in checks(doc, host)[:-3] + checks(doc, host)[-2:]:
            assert set(check) == {"name", "status", "observed", "expected", "fix"} and check["fix"] is None
    assert checks(doc, "tb2")[-4]["observed"] == "NPU 2,3 free"
    assert checks(doc, "tb2")[-2]["observed"] == "1 free"  # its port 8381
    assert checks(doc, "tb1")[4]["observed"] == "23.0.6"

    code, out, err = deployctl("doctor", path)
    assert code == 0 and "all checks passed on 2 host(s)" in out and "tb2" in out


def test_disaggregated_across_hosts_checks_hccn_and_pings(bed, deployctl):
    path = write_spec(bed, deployctl, "doc-pd", pd("tb1", "tb2"), ["tb1", "tb2"])
    code, doc = deployctl.json("doctor", path)
    assert code == 0, failing(doc)
    hccn = [(n, s) for n, s in statuses(doc, "tb1") if n.startswith("hccn")]
    assert hccn == [("hccn_ip", "PASS"), ("hccn_conf", "PASS"), ("hccn_link", "PASS"), ("hccn_tls", "PASS"),
                    ("hccn_ping", "PASS")]
    ping = [c for c in checks(doc, "tb2") if c["name"] == "hccn_ping"][0]
    assert ping["observed"] == "2 peers answered"
    pings = [c["argv"] for c in bed.calls("tb1") if "-ping" in c["argv"]]
    assert ["-i", "0", "-ping", "-g", "address", "10.201.2.10"] in pings


def test_a_stale_hccn_conf_entry_fails_naming_the_npu_and_both_addresses(bed, deployctl, restore_profiles):
    # vllm-ascend PR #16847: one stale address in /etc/hccn.conf, every NIC healthy and answering pings
    bed.set_profile("tb2", hccn_conf_ips={"1": "10.201.2.99"})
    path = write_spec(bed, deployctl, "doc-stale", pd("tb1", "tb2"), ["tb1", "tb2"])
    code, doc = deployctl.json("doctor", path)
    assert code == 3 and failing(doc) == [("tb2", "hccn_conf", 1)]
    (stale,) = [c for c in checks(doc, "tb2") if c["name"] == "hccn_conf"]
    assert stale["observed"] == "NPU 1: /etc/hccn.conf says 10.201.2.99, the NIC has 10.201.2.11"
    assert stale["fix"].startswith("set address_1=10.201.2.11 in /etc/hccn.conf")
    code, doc = deployctl.json("up", path, "--skip", "weights")
    assert code == 3 and container_ids(bed, "tb2", "doc-stale") == {}  # up stops before any change
    bundle = doc["error"]["diagnose"]["bundle"]  # and writes what an issue about it needs
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        error = tar.extractfile(next(n for n in names if n.endswith("up-error.txt"))).read().decode()
    assert any(n.endswith("tb2/hccn.conf") for n in names) and any(n.endswith("tb2/hccn/npu1-ip.txt") for n in names)
    assert "NPU 1: /etc/hccn.conf says 10.201.2.99, the NIC has 10.201.2.11" in error


def test_wrong_driver_fails_driver_on_that_host_only(bed, deployctl, restore_profiles):
    bed.set_profile("tb2", driver="23.0.5")
    path = write_spec(bed, deployctl, "doc-drv", mixed("tb1") + "    - {host: tb2, devices: [0], port: 8381}\n",
                      ["tb1", "tb2"])
    code, doc = deployctl.json("doctor", path)
    assert code == 3 and doc["ok"] is False
    assert failing(doc) == [("tb2", "driver", None)]
    driver = [c for c in checks(doc, "tb2") if c["name"] == "driver"][0]
    assert driver["observed"] == "23.0.5" and driver["expected"] == "exactly 23.0.6"
    assert driver["fix"].startswith("install Ascend HDK driver 23.0.6")


def test_card_alarm_fails_npu_health_naming_the_card(bed, deployctl, restore_profiles):
    bed.set_profile("tb1", health={5: "Alarm"})
    code, doc = deployctl.json("doctor", write_spec(bed, deployctl, "doc-alarm", mixed("tb1"), ["tb1"]))
    assert code == 3
    assert failing(doc) == [("tb1", "npu_health", 5)]
    health = [c for c in checks(doc, "tb1") if c["name"] == "npu_health"][0]
    assert health["observed"] == "NPU 5 health Alarm" and health["npu"] == 5


def test_a_process_named_by_the_specs_secret_is_quoted_redacted(bed, deployctl, restore_profiles, monkeypatch):
    """The host's npu-smi lists a process whose name is the spec's ${HF_TOKEN} value: doctor's npu_free FAIL quotes
    it `<redacted>` in its table and JSON (deployctl/redaction.py, as every other quote of a host's text)."""
    token = "hf_bEdDoCtOr0123456789"
    monkeypatch.setenv("E2E_DOCTOR_TOKEN", token)
    bed.set_profile("tb1", processes={"0": [{"pid": 4242, "name": token, "memory_mb": 100}]})
    path = deployctl.write(bed.spec_yaml("doc-secret", mixed("tb1"), hosts_used=["tb1"], extra=MODEL + REQUIREMENTS
                                         + "env: {HF_TOKEN: '${E2E_DOCTOR_TOKEN}'}\n"))
    code, doc = deployctl.json("doctor", path)
    assert code == 3 and failing(doc) == [("tb1", "npu_free", 0)]
    assert [c["observed"] for c in checks(doc, "tb1") if c["name"] == "npu_free"] == [
        "NPU 0 used by pid 4242 (<redacted>, 100 MB)"]
    code, out, err = deployctl("doctor", path)
    assert code == 3 and "<redacted>" in out and token not in out + err + json.dumps(doc)


def test_ip_forward_off_then_fix_persists_on_that_host_only_and_is_idempotent(bed, deployctl, restore_profiles):
    bed.set_ip_forward("tb3", 0)
    path = write_spec(bed, deployctl, "doc-fwd", mixed("tb3") + "    - {host: tb4, devices: [0], port: 8381}\n",
                      ["tb3", "tb4"])
    try:
        code, doc = deployctl.json("doctor", path)
        assert code == 3 and failing(doc) == [("tb3", "ip_forward", None)]
        assert [c for c in checks(doc, "tb3") if c["name"] == "ip_forward"][0]["observed"] == "0"

        code, doc = deployctl.json("doctor", path, "--fix")
        assert code == 0 and doc["ok"] is True
        assert doc["fixes"] == [{"host": "tb3", "check": "ip_forward", "changed": True, "actions": [
            "sysctl -w net.ipv4.ip_forward=1", f"wrote {SYSCTL_FILE} (net.ipv4.ip_forward = 1)"],
            "files": [SYSCTL_FILE]}]
        assert ("ip_forward", "PASS") in statuses(doc, "tb3")
        assert bed.run_on("tb3", ["sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "1"
        assert "net.ipv4.ip_forward = 1" in bed.run_on("tb3", ["cat", SYSCTL_FILE]).stdout
        assert bed.run_on("tb4", ["test", "-e", SYSCTL_FILE], check=False).returncode == 1

        code, out, err = deployctl("doctor", path, "--fix")
        assert code == 0 and "nothing to fix" in err
        code, doc = deployctl.json("doctor", path, "--fix")
        assert code == 0 and doc["fixes"] == []
    finally:
        bed.run_on("tb3", ["rm", "-f", SYSCTL_FILE])


def test_docker_daemon_stopped_fails_docker(bed, deployctl):
    bed.stop_dockerd("tb4")
    try:
        code, doc = deployctl.json("doctor", write_spec(bed, deployctl, "doc-dkr", mixed("tb4"), ["tb4"]))
    finally:
        bed.start_dockerd("tb4")
    assert code == 3
    docker = [c for c in checks(doc, "tb4") if c["name"] == "docker"][0]
    assert docker["status"] == "FAIL" and "daemon not reachable" in docker["observed"]
    assert "systemctl enable --now docker" in docker["fix"]
    assert ("tb4", "docker", None) in failing(doc)


def test_npu_held_by_another_container_fails_npu_free_naming_it(bed, deployctl):
    bed.docker_on("tb1", "run", "--detach", "--name", "npu-thief", "--device", "/dev/davinci1", "--init",
                  bed.base_image, "sleep", "300")
    try:
        path = write_spec(bed, deployctl, "doc-busy", mixed("tb1", "1"), ["tb1"])
        code, doc = deployctl.json("doctor", path)
        assert code == 3 and failing(doc) == [("tb1", "npu_free", 1)]
        free = [c for c in checks(doc, "tb1") if c["name"] == "npu_free"][0]
        assert free["observed"] == "NPU 1 held by container npu-thief (not deployctl's)"
        assert free["fix"].startswith("stop that container (docker stop npu-thief)")

        other = write_spec(bed, deployctl, "doc-busy2", mixed("tb1", "2"), ["tb1"])
        assert deployctl.json("doctor", other)[0] == 0  # another NPU of the same host is free
    finally:
        bed.docker_on("tb1", "rm", "--force", "npu-thief")


def test_missing_device_ip_fails_hccn_ip(bed, deployctl, restore_profiles):
    ips = list(bed.profile("tb2")["device_ips"])
    ips[0] = None
    bed.set_profile("tb2", device_ips=ips)
    code, doc = deployctl.json("doctor", write_spec(bed, deployctl, "doc-ip", pd("tb1", "tb2"), ["tb1", "tb2"]))
    assert code == 3
    assert ("tb2", "hccn_ip", 0) in failing(doc)
    hccn_ip = [c for c in checks(doc, "tb2") if c["name"] == "hccn_ip"][0]
    assert hccn_ip["observed"] == "NPU 0: no RoCE IP" and hccn_ip["npu"] == 0


def test_link_down_fails_hccn_link(bed, deployctl, restore_profiles):
    bed.set_profile("tb2", link={1: "DOWN"})
    code, doc = deployctl.json("doctor", write_spec(bed, deployctl, "doc-link", pd("tb1", "tb2"), ["tb1", "tb2"]))
    assert code == 3
    link = [c for c in checks(doc, "tb2") if c["name"] == "hccn_link"]
    assert [(c["status"], c["npu"], c["observed"]) for c in link] == [("FAIL", 1, "NPU 1: link DOWN")]
    # The peer's NPU 1 answers no ping either way: from tb1 (its link is down) and to tb1 (its own link is down).
    assert failing(doc) == [("tb1", "hccn_ping", 1), ("tb2", "hccn_link", 1), ("tb2", "hccn_ping", 1)]
    pings = [(h["host"], c["observed"]) for h in doc["hosts"] for c in h["checks"] if c["name"] == "hccn_ping"]
    assert pings == [("tb1", "NPU 1 -> 10.201.2.11: 0/3 answered"), ("tb2", "NPU 1 -> 10.201.1.11: 0/3 answered")]


DEBIAN_LIKE = ('PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n')
EULER_LIKE = ('NAME="EulerOS"\nVERSION="2.0 (SP10)"\nID="euleros"\nVERSION_ID="2.0"\n'
              'PRETTY_NAME="EulerOS 2.0 (SP10)"\nANSI_COLOR="0;31"\n')
# first on the SSH session's PATH, in the host's own /usr/local overlay
TOOLS = "/usr/local/Ascend/driver/tools"
NO_DOCKER = "#!/bin/sh\necho 'sh: docker: command not found' >&2\nexit 127\n"
AARCH64 = '#!/bin/sh\nif [ "$1" = -m ]; then echo aarch64; exit 0; fi\nexec /bin/uname "$@"\n'


def _put(bed, host, path, text, mode="644"):
    bed.run_on(host, ["sh", "-c", f'rm -f "$1" && cat > "$1" && chmod {mode} "$1"', "sh", path], input=text)


def _os_release_of(bed, host):
    """What to put back: the symlink target (the usual /etc/os-release) or the file's text."""
    link = bed.run_on(host, ["readlink", "/etc/os-release"], check=False)
    return ("link", link.stdout.strip()) if link.returncode == 0 else ("text", bed.run_on(
        host, ["cat", "/etc/os-release"]).stdout)


def _restore_os_release(bed, host, saved):
    kind, value = saved
    if kind == "link":
        bed.run_on(host, ["sh", "-c", 'rm -f /etc/os-release && ln -s "$1" /etc/os-release', "sh", value])
    else:
        _put(bed, host, "/etc/os-release", value)


def test_docker_hint_follows_each_hosts_os_and_architecture(bed, deployctl):
    """No docker on a Debian-like x86_64 host and an EulerOS-like aarch64 host: each gets its own recipe."""
    saved = {host: _os_release_of(bed, host) for host in ("tb3", "tb4")}
    try:
        _put(bed, "tb3", "/etc/os-release", DEBIAN_LIKE)
        _put(bed, "tb4", "/etc/os-release", EULER_LIKE)
        for host in ("tb3", "tb4"):
            _put(bed, host, f"{TOOLS}/docker", NO_DOCKER, mode="755")
        _put(bed, "tb4", f"{TOOLS}/uname", AARCH64, mode="755")
        path = write_spec(bed, deployctl, "doc-os", mixed("tb3") + "    - {host: tb4, devices: [0], port: 8381}\n",
                          ["tb3", "tb4"])
        code, doc = deployctl.json("doctor", path)
    finally:
        for host in ("tb3", "tb4"):
            bed.run_on(host, ["rm", "-f", f"{TOOLS}/docker", f"{TOOLS}/uname"])
            _restore_os_release(bed, host, saved[host])
    assert code == 3
    docker = {h: [c for c in checks(doc, h) if c["name"] == "docker"][0] for h in ("tb3", "tb4")}
    assert docker["tb3"]["observed"] == docker["tb4"]["observed"] == "docker not found on the host"
    assert docker["tb3"]["fix"] == ("install docker (Ubuntu 24.04.1 LTS: apt-get install -y docker.io) and run: "
                                    "systemctl enable --now docker")
    assert docker["tb4"]["fix"] == ("install docker (EulerOS 2.0 (SP10): yum install -y docker-engine.aarch64 "
                                    "docker-engine-selinux.noarch docker-runc.aarch64) and run: "
                                    "systemctl enable --now docker")
    # put back: each host's own os-release, and docker answers again
    assert {host: _os_release_of(bed, host) for host in ("tb3", "tb4")} == saved
    assert deployctl.json("doctor", path)[0] == 0


def test_host_down_is_a_failing_ssh_row_not_a_crash(bed, deployctl):
    first = bed.hosts[0]
    code, doc = deployctl.json("doctor", "--host", "root@10.200.0.11:2", "--host", "root@10.200.0.12",
                               "--identity-file", first.identity_file, "--known-hosts", first.known_hosts)
    assert code == 3
    down = doc["hosts"][0]
    assert (down["host"], down["address"], down["reachable"]) == ("10.200.0.11:2", "10.200.0.11", False)
    assert [(c["name"], c["status"], c["observed"]) for c in down["checks"]] == [
        ("ssh", "FAIL", "cannot connect to 10.200.0.11:2: connection refused")]
    # the command to try by hand is the real one, not `ssh -p PORT USER@ADDRESS`
    assert f"(ssh -p 2 -i {first.identity_file} root@10.200.0.11)" in down["checks"][0]["fix"]
    up = doc["hosts"][1]
    assert up["reachable"] is True and up["checks"][0] == {
        "name": "ssh", "status": "PASS", "observed": "connected", "expected": "reachable over SSH", "fix": None}
    # no spec: the default requirements (driver and HBM not pinned, nothing about devices or disk)
    assert [(c["name"], c["status"]) for c in up["checks"]] == [
        ("ssh", "PASS"), ("npu_count", "PASS"), ("npu_health", "PASS"), ("npu_memory", "SKIP"), ("driver", "SKIP"),
        ("firmware", "PASS"), ("docker", "PASS"), ("ip_forward", "PASS"), ("disk", "SKIP"), ("npu_free", "SKIP")]


def test_unknown_host_key_fails_ssh_with_fingerprint_and_trust_command(bed, deployctl, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    code, doc = deployctl.json("doctor", "--host", "root@10.200.0.12", "--identity-file", bed.hosts[0].identity_file,
                               "--known-hosts", str(empty))
    assert code == 3
    (ssh,) = doc["hosts"][0]["checks"]
    assert ssh["status"] == "FAIL" and "unknown host key ssh-ed25519 SHA256:" in ssh["observed"]
    assert f"ssh-keyscan -p 22 -t ed25519 10.200.0.12 >> {empty}" in ssh["fix"]
    assert empty.read_text() == ""  # never trusted silently


def test_up_refuses_with_exit_3_and_changes_nothing_when_a_check_fails(bed, deployctl, restore_profiles):
    bed.set_ip_forward("tb3", 0)
    path = write_spec(bed, deployctl, "doc-up", mixed("tb3", "6, 7", 8382), ["tb3"])
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes")
        assert code == 3, err
        assert "tb3 ip_forward: 0 (expected 1)" in err and "nothing was changed" in err
        assert container_ids(bed, "tb3", "doc-up") == {}
        assert bed.run_on("tb3", ["sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "0"
    finally:
        deployctl("down", path, "--yes")


def test_host_outside_the_spec_is_a_usage_error(bed, deployctl):
    path = write_spec(bed, deployctl, "doc-usage", mixed("tb1"), ["tb1"])
    code, out, err = deployctl("doctor", path, "--host", "tb9")
    assert code == 2 and "not a host of doc-usage" in err


def test_a_driver_below_the_vllm_ascend_lines_floor_fails_server_profile_on_that_host_only(bed, deployctl,
                                                                                         restore_profiles):
    """Issue 41 item 5: the v0.26.0rc1 image runs CANN 9.1.0, which runs on Ascend HDK 25.5.X and later (CANN 9.1.0's
    release notes): the host whose npu-smi reports 23.0.6 FAILs, the one on 25.5.1 passes."""
    from tests.e2e.test_vllm_ascend import MIXED_ONE_HOST, spec
    from tests.testbed import layout

    bed.set_profile("tb3", driver="25.5.1")
    group = MIXED_ONE_HOST.splitlines()[-1]
    topology = MIXED_ONE_HOST.replace("tb1", "tb3") + group.replace("tb1", "tb4").replace("8310", "8320") + "\n"
    path = deployctl.write(spec(bed, "doc-va-drv", topology, ["tb3", "tb4"], cards=8,
                                image=layout.standin_image("v0.26.0rc1")))
    code, doc = deployctl.json("doctor", path)
    assert code == 3 and doc["ok"] is False
    row = {h["host"]: next(c for c in h["checks"] if c["name"] == "server_profile") for h in doc["hosts"]}
    assert ("tb4", "server_profile", None) in failing(doc) and row["tb3"]["status"] == "PASS"
    assert row["tb4"]["observed"].endswith("from the image tag v0.26.0rc1; driver 23.0.6")
    assert row["tb4"]["expected"].endswith("NPU driver >= 25.5")
    assert row["tb4"]["fix"].startswith("install Ascend HDK 25.5 or later (CANN 9.1.0 runs on")
