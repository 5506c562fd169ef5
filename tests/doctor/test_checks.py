"""The doctor's rules on plain HostFacts built from the vendor output samples."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from deployctl.facts import docker, files, hccn_tool, npu_smi, nvidia_smi, system
from deployctl.facts.hccn_model import HccnDeviceFacts
from deployctl.facts.model import HostFacts
from deployctl.doctor.checks import IP_FORWARD_FIX, Finding, check_host, check_tls_consistency
from deployctl.doctor.checks_npu import check_driver
from deployctl.spec.model import Requirements

FORMATS = Path(__file__).parent.parent / "fixtures" / "formats"


def out(case: str) -> str:
    return (FORMATS / case / "stdout.txt").read_text()


def err(case: str) -> str:
    return (FORMATS / case / "stderr.txt").read_text().strip()


ASCEND = Requirements(driver="23.0.6", cards=8, npu_memory_gb=64, ip_forward=True, free_disk_gb=60)
HEALTHY = HostFacts(
    arch="aarch64",
    npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-910b3-8x64g-healthy-23.0.6")),
    npu_count=npu_smi.parse_npu_smi_count(out("npu-smi/info-l-8cards")),
    boards=(npu_smi.parse_npu_smi_board(out("npu-smi/board-i1-23.0.6")),),
    driver_files=files.parse_version_info(out("files/driver-version-info-23.0.6")),
    docker=docker.parse_docker_version(out("system/docker-version-json")),
    docker_info=docker.parse_docker_info(out("system/docker-info-json")),
    ip_forward=system.parse_sysctl_value("1\n"),  # what the probe, `sysctl -n net.ipv4.ip_forward`, prints
    disk=system.parse_df(out("system/df-pk-weights")),
    disk_path="/mnt/weights",
    containers=(),
)
INSPECT = docker.parse_docker_inspect(out("system/docker-inspect-npu-holders"))


def by_name(findings, name: str) -> list[Finding]:
    return [f for f in findings if f.name == name]


def statuses(findings) -> list[tuple[str, str]]:
    return [(f.name, f.status) for f in findings]


def test_healthy_host_passes_every_check_in_contract_order():
    findings = check_host(ASCEND, HEALTHY, devices_used=(4, 5), own_deployment="llama2-13b-pd")
    assert statuses(findings) == [
        ("ssh", "PASS"), ("npu_count", "PASS"), ("npu_health", "PASS"), ("npu_memory", "PASS"),
        ("driver", "PASS"), ("firmware", "PASS"), ("docker", "PASS"), ("ip_forward", "PASS"),
        ("disk", "PASS"), ("npu_free", "PASS"),
    ]
    assert by_name(findings, "driver")[0].observed == "23.0.6"
    assert by_name(findings, "disk")[0].observed == "6005.1 GB free on /mnt (/dev/nvme0n1p1)"
    assert by_name(findings, "firmware")[0].expected == "compatible with the driver (7.0.0-7.1.99)"


def test_unreachable_host_gets_only_the_ssh_failure():
    facts = HostFacts(reachable=False, error="connection refused (192.0.2.11:22)")
    (finding,) = check_host(ASCEND, facts)
    assert (finding.name, finding.status, finding.observed) == ("ssh", "FAIL", "connection refused (192.0.2.11:22)")
    assert finding.fix


def test_card5_alarm_fails_npu_health_for_card_5_only():
    facts = replace(HEALTHY, npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-910b2-card5-alarm")))
    health = by_name(check_host(ASCEND, facts), "npu_health")
    assert [(f.status, f.npu, f.observed) for f in health] == [("FAIL", 5, "NPU 5 health Alarm")]
    assert health[0].fix.startswith("read the error code (npu-smi info -t health -i 5 -c 0)")
    assert health[0].to_json() == {"name": "npu_health", "status": "FAIL", "observed": "NPU 5 health Alarm",
                                   "expected": "OK", "fix": health[0].fix, "npu": 5}


def test_driver_23_0_5_fails_an_exact_23_0_6_requirement():
    facts = HostFacts(npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-910b3-driver-23.0.5")))
    finding = check_driver(ASCEND, facts)
    assert (finding.status, finding.observed, finding.expected) == ("FAIL", "23.0.5", "exactly 23.0.6")
    assert finding.fix == "install Ascend HDK driver 23.0.6 (AscendCloud 6.3.909, 6.3.908 are validated with it), then reboot"


def test_loaded_driver_differing_from_installed_asks_for_a_reboot():
    facts = replace(HEALTHY, npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-910b3-driver-23.0.5")))
    finding = check_driver(ASCEND, facts)
    assert finding.status == "FAIL"
    assert finding.observed == "npu-smi: 23.0.5, board of NPU 1: 23.0.6, version.info: 23.0.6"
    assert finding.fix == "reboot so the installed driver 23.0.6 is the one loaded"


def test_newer_driver_is_still_a_mismatch_and_unpinned_driver_is_skipped():
    facts = HostFacts(boards=(npu_smi.parse_npu_smi_board(out("npu-smi/board-i0-24.1.rc2")),))
    assert check_driver(ASCEND, facts).status == "FAIL"
    assert (check_driver(Requirements(), facts).status, check_driver(Requirements(), facts).observed) == ("SKIP", "24.1.rc2")


def _facts_from_case(case: Path) -> HostFacts:
    cmd, text = (case / "cmd.txt").read_text().strip(), (case / "stdout.txt").read_text()
    if cmd == "npu-smi info":
        return HostFacts(npu=npu_smi.parse_npu_smi_info(text))
    if cmd.startswith("npu-smi info -t board"):
        return HostFacts(boards=(npu_smi.parse_npu_smi_board(text),))
    assert cmd.endswith("version.info"), cmd
    return HostFacts(driver_files=files.parse_version_info(text))


METS = sorted(p.parent for p in FORMATS.glob("*/*/facts.json") if "meets_driver_23_0_6" in p.read_text())


@pytest.mark.parametrize("case", METS, ids=lambda p: p.name)
def test_meets_driver_23_0_6_agrees_with_the_samples(case):
    meets = json.loads((case / "facts.json").read_text())["meets_driver_23_0_6"]
    finding = check_driver(Requirements(driver="23.0.6"), _facts_from_case(case))
    assert finding.status == ("PASS" if meets else "FAIL")


def test_meets_cases_exist():
    assert len(METS) >= 8


def test_32gb_cards_fail_a_64gb_requirement_and_pass_32():
    facts = replace(HEALTHY, npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-910b4-8x32g-healthy-23.0.6")))
    (memory,) = by_name(check_host(ASCEND, facts), "npu_memory")
    assert (memory.status, memory.observed, memory.expected) == ("FAIL", "32 GB (32768 MB HBM per NPU)", ">= 64 GB HBM per NPU")
    (memory,) = by_name(check_host(replace(ASCEND, npu_memory_gb=32), facts), "npu_memory")
    assert memory.status == "PASS"


def test_too_few_cards():
    (count,) = by_name(check_host(replace(ASCEND, cards=16), HEALTHY), "npu_count")
    assert (count.status, count.observed, count.expected) == ("FAIL", "8 NPUs", ">= 16 NPUs")


def test_dcmi_failure_is_reported_not_crashed():
    facts = replace(HEALTHY, npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-dcmi-init-failed-8005")), npu_count=None, boards=None)
    findings = check_host(ASCEND, facts, devices_used=(0,))
    (count,) = by_name(findings, "npu_count")
    assert (count.status, count.observed) == ("FAIL", "npu-smi info: dcmi module initialize failed (ret -8005)")
    assert "reboot" in count.fix
    assert by_name(findings, "npu_health")[0].status == "SKIP"
    assert by_name(findings, "firmware")[0].status == "SKIP"


def test_missing_npu_smi_is_a_fail_with_an_install_fix():
    facts = replace(HEALTHY, npu=None, npu_count=None, boards=None, driver_files=None, missing_tools=("npu-smi",))
    findings = check_host(ASCEND, facts)
    (count,) = by_name(findings, "npu_count")
    assert (count.status, count.observed) == ("FAIL", "npu-smi not found on the host")
    assert count.fix == "install the Ascend HDK driver package (it provides npu-smi) and reboot"
    assert by_name(findings, "driver")[0].status == "FAIL"


def test_docker_daemon_down_and_docker_missing():
    down = replace(HEALTHY, docker=docker.parse_docker_version(out("system/docker-version-json-daemon-down")),
                   docker_error=err("system/docker-version-json-daemon-down"))
    (finding,) = by_name(check_host(ASCEND, down), "docker")
    assert finding.status == "FAIL"
    assert finding.observed == ("client 28.2.2; daemon not reachable: Cannot connect to the Docker daemon at "
                                "unix:///var/run/docker.sock. Is the docker daemon running?")
    assert "systemctl enable --now docker" in finding.fix
    missing = replace(HEALTHY, docker=None, missing_tools=("docker",))
    (finding,) = by_name(check_host(ASCEND, missing), "docker")
    assert (finding.status, finding.observed) == ("FAIL", "docker not found on the host")
    assert finding.fix.startswith("install docker")


def test_ip_forward_zero_fails_with_the_fix_command():
    facts = replace(HEALTHY, ip_forward=system.parse_sysctl_value(out("system/sysctl-n-ip-forward-0")))
    (finding,) = by_name(check_host(ASCEND, facts), "ip_forward")
    assert (finding.status, finding.observed, finding.expected, finding.fix) == ("FAIL", "0", "1", IP_FORWARD_FIX)
    assert IP_FORWARD_FIX == "deployctl doctor --fix (sets net.ipv4.ip_forward=1 now and in /etc/sysctl.d/)"
    (finding,) = by_name(check_host(replace(ASCEND, ip_forward=False), facts), "ip_forward")
    assert finding.status == "SKIP"


def test_disk_too_small_and_unknown():
    (finding,) = by_name(check_host(replace(ASCEND, free_disk_gb=7000), HEALTHY), "disk")
    assert (finding.status, finding.expected) == ("FAIL", ">= 7000 GB free at /mnt/weights")
    assert finding.fix == "free 994.9 GB more on /mnt, or set weights.dest on a larger filesystem"
    unknown = replace(HEALTHY, disk=None, probe_errors=(("disk", "df: /mnt/weights: No such file or directory"),))
    (finding,) = by_name(check_host(ASCEND, unknown), "disk")
    assert (finding.status, finding.observed) == ("FAIL", "df failed: df: /mnt/weights: No such file or directory")


def test_npu_held_by_processes_fails_per_npu_naming_the_pid():
    facts = replace(HEALTHY, npu=npu_smi.parse_npu_smi_info(out("npu-smi/info-910b3-procs-cards0-3")))
    free = by_name(check_host(ASCEND, facts, devices_used=(0, 1, 4)), "npu_free")
    assert [(f.status, f.npu, f.observed) for f in free] == [
        ("FAIL", 0, "NPU 0 used by pid 214733 (python3.9, 52876 MB)"),
        ("FAIL", 1, "NPU 1 used by pid 214736 (python3.9, 52876 MB)"),
    ]


def test_npu_held_by_containers():
    facts = replace(HEALTHY, containers=INSPECT)
    ours = by_name(check_host(ASCEND, facts, devices_used=(4, 5, 6), own_deployment="llama2-13b-pd"), "npu_free")
    assert [f.status for f in ours] == ["PASS"]  # 4,5 are ours; bench-old on 6 has exited
    theirs = by_name(check_host(ASCEND, facts, devices_used=(2, 4), own_deployment="other"), "npu_free")
    assert [(f.npu, f.observed) for f in theirs] == [
        (2, "NPU 2 held by container alice-dev (not deployctl's)"),
        (4, "NPU 4 held by container llama2-13b-pd-prefill-0 of deployment llama2-13b-pd"),
    ]
    assert theirs[0].fix == "stop that container (docker stop alice-dev) or give the instance other devices"


def test_own_container_processes_do_not_count_as_busy():
    procs = npu_smi.parse_npu_smi_info(out("npu-smi/info-910b3-procs-cards0-3"))
    mine = replace(INSPECT[1], labels=(("deployctl.deployment", "llama2-13b-pd"),))
    facts = replace(HEALTHY, npu=procs, containers=(mine,))
    assert [f.status for f in by_name(check_host(ASCEND, facts, devices_used=(0, 1), own_deployment="llama2-13b-pd"), "npu_free")] == ["PASS"]


def test_device_not_visible():
    (finding,) = by_name(check_host(ASCEND, HEALTHY, devices_used=(9,)), "npu_free")
    assert (finding.status, finding.npu, finding.observed) == ("FAIL", 9, "NPU 9 is not visible")


def _hccn_facts(**changes) -> HostFacts:
    tls = hccn_tool.parse_hccn_tls(out("hccn_tool/tls-g-switch"))
    devices = (
        HccnDeviceFacts(0, hccn_tool.parse_hccn_ip(out("hccn_tool/ip-g-dev0")),
                        hccn_tool.parse_hccn_link(out("hccn_tool/link-g-up")), tls),
        HccnDeviceFacts(5, None, hccn_tool.parse_hccn_link(out("hccn_tool/link-g-up")), replace(tls, device_id=5)),
        HccnDeviceFacts(6, None, hccn_tool.parse_hccn_link(out("hccn_tool/link-g-down")), replace(tls, device_id=6)),
    )
    return replace(HEALTHY, hccn=devices, **changes)


def test_hccn_checks_only_for_disaggregated():
    assert not [f for f in check_host(ASCEND, _hccn_facts(), devices_used=(0,)) if f.name.startswith("hccn")]
    findings = check_host(ASCEND, _hccn_facts(), devices_used=(0,), disaggregated=True)
    assert statuses(f for f in findings if f.name.startswith("hccn")) == [
        ("hccn_ip", "PASS"), ("hccn_link", "PASS"), ("hccn_tls", "PASS"), ("hccn_ping", "SKIP")]


def test_hccn_missing_ip_fails_and_hccn_conf_only_warns():
    findings = check_host(ASCEND, _hccn_facts(), devices_used=(0, 5), disaggregated=True)
    (ip,) = by_name(findings, "hccn_ip")
    assert (ip.status, ip.npu, ip.observed) == ("FAIL", 5, "NPU 5: no RoCE IP")
    conf = files.parse_hccn_conf(out("files/hccn-conf-8dev"))
    (ip,) = by_name(check_host(ASCEND, _hccn_facts(hccn_conf=conf), devices_used=(0, 5), disaggregated=True), "hccn_ip")
    assert (ip.status, ip.observed) == ("WARN", "NPU 5: no live IP; /etc/hccn.conf has 198.51.100.16")


def test_hccn_link_down_fails_for_that_npu():
    (link,) = by_name(check_host(ASCEND, _hccn_facts(), devices_used=(0, 6), disaggregated=True), "hccn_link")
    assert (link.status, link.npu, link.observed) == ("FAIL", 6, "NPU 6: link DOWN")


def test_hccn_ping_unreachable_fails():
    pings = (hccn_tool.parse_hccn_ping(out("hccn_tool/ping-unreachable")), hccn_tool.parse_hccn_ping(out("hccn_tool/ping-ok")))
    (ping,) = by_name(check_host(ASCEND, _hccn_facts(hccn_pings=pings), devices_used=(0,), disaggregated=True), "hccn_ping")
    assert (ping.status, ping.npu, ping.observed) == ("FAIL", 0, "NPU 0 -> 198.51.100.31: 0/3 answered")


def test_tls_consistency_across_hosts():
    off = hccn_tool.parse_hccn_tls(out("hccn_tool/tls-g-switch"))
    on = hccn_tool.parse_hccn_tls(out("hccn_tool/tls-g-switch-enabled"))
    node1 = HostFacts(hccn=(HccnDeviceFacts(0, tls=off),))
    node2 = HostFacts(hccn=(HccnDeviceFacts(3, tls=on),))
    same = check_tls_consistency({"node1": node1, "node2": node1, "node3": HostFacts()})
    assert {h: f.status for h, f in same.items()} == {"node1": "PASS", "node2": "PASS", "node3": "SKIP"}
    differ = check_tls_consistency({"node1": node1, "node2": node2})
    assert {h: f.status for h, f in differ.items()} == {"node1": "FAIL", "node2": "FAIL"}
    assert differ["node1"].observed == "node1: disabled; node2: enabled"


GPU = Requirements(driver="550.54.15", cards=4, gpu_memory_gb=80)
GPU_FACTS = HostFacts(
    gpus=nvidia_smi.parse_nvidia_smi_query_gpu(out("nvidia-smi/query-gpu-csv")),
    gpu_processes=nvidia_smi.parse_nvidia_smi_compute_apps(out("nvidia-smi/query-compute-apps-busy")),
    docker=docker.parse_docker_version(out("system/docker-version-json")),
    docker_info=replace(docker.parse_docker_info(out("system/docker-info-json")), runtimes=("nvidia", "runc")),
    ip_forward=1,
    containers=(),
)


def test_gpu_host_passes_and_gets_no_npu_checks():
    findings = check_host(GPU, GPU_FACTS, platform="gpu", devices_used=(0, 2))
    assert statuses(findings) == [
        ("ssh", "PASS"), ("gpu_count", "PASS"), ("gpu_memory", "PASS"), ("driver", "PASS"), ("docker", "PASS"),
        ("nvidia_runtime", "PASS"), ("ip_forward", "PASS"), ("disk", "SKIP"), ("gpu_free", "PASS"),
    ]


def test_gpu_failures():
    facts = replace(GPU_FACTS, docker_info=docker.parse_docker_info(out("system/docker-info-json")))
    findings = check_host(replace(GPU, driver="560.28.03", gpu_memory_gb=96, cards=8), facts, platform="gpu",
                          devices_used=(0, 1))
    assert (by_name(findings, "gpu_count")[0].status, by_name(findings, "driver")[0].observed) == ("FAIL", "550.90.07")
    assert by_name(findings, "driver")[0].status == "FAIL"
    assert [(f.gpu, f.observed) for f in by_name(findings, "gpu_memory")] == [(0, "GPU 0: 81559 MiB"), (1, "GPU 1: 81559 MiB")]
    assert by_name(findings, "nvidia_runtime")[0].observed == "ascend, runc"
    assert [(f.status, f.gpu, f.observed) for f in by_name(findings, "gpu_free")] == [
        ("FAIL", 1, "GPU 1 used by pid 48213 (/usr/bin/python3, 72514 MiB)")]


def test_gpu_memory_threshold_is_95_percent():
    h100 = replace(GPU, gpu_memory_gb=80)  # 81559 >= 0.95 * 80 * 1024 = 77824
    assert by_name(check_host(h100, GPU_FACTS, platform="gpu"), "gpu_memory")[0].expected == ">= 77824 MiB (80 GB class)"
    assert by_name(check_host(replace(GPU, gpu_memory_gb=84), GPU_FACTS, platform="gpu"), "gpu_memory")[0].status == "FAIL"


def test_missing_nvidia_smi_fails_with_install_fix():
    facts = replace(GPU_FACTS, gpus=None, missing_tools=("nvidia-smi",))
    (count,) = by_name(check_host(GPU, facts, platform="gpu"), "gpu_count")
    assert (count.status, count.fix) == ("FAIL", "install the NVIDIA driver (it provides nvidia-smi)")


def test_every_fail_has_a_one_line_fix():
    bad = HostFacts(missing_tools=("npu-smi", "docker", "sysctl", "df", "hccn_tool"), containers=INSPECT)
    findings = check_host(ASCEND, bad, devices_used=(0, 4), own_deployment="x", disaggregated=True)
    findings += check_host(GPU, replace(bad, missing_tools=("nvidia-smi", "docker")), platform="gpu", devices_used=(0,))
    fails = [f for f in findings if f.status == "FAIL"]
    assert len(fails) >= 10
    assert all(f.fix and "\n" not in f.fix for f in fails), [f for f in fails if not f.fix]


def test_weights_identity_pass_skip_warn_fail():
    from deployctl.doctor.checks import check_weights_identity

    same = check_weights_identity({"a": "sha256:1", "b": "sha256:1"})
    assert {h: f.status for h, f in same.items()} == {"a": "PASS", "b": "PASS"}
    assert {f.status for f in check_weights_identity({"a": None, "b": None}).values()} == {"SKIP"}
    partial = check_weights_identity({"a": "sha256:1", "b": None})
    assert (partial["a"].status, partial["b"].status) == ("PASS", "WARN")
    differ = check_weights_identity({"a": "sha256:1", "b": "sha256:2"})
    assert {f.status for f in differ.values()} == {"FAIL"} and "weights sync" in differ["b"].fix


def _release(case: str):
    return system.parse_os_release(out(f"system/os-release-{case}"))


@pytest.mark.parametrize("case, arch, command", [
    ("ubuntu-24.04", "x86_64", "Ubuntu 24.04.1 LTS: apt-get install -y docker.io"),
    ("debian-12", "aarch64", "Debian GNU/Linux 12 (bookworm): apt-get install -y docker.io"),
    ("hce-2.0", "aarch64", "Huawei Cloud EulerOS 2.0 (aarch64): yum install -y docker-engine.aarch64 "
                           "docker-engine-selinux.noarch docker-runc.aarch64"),
    ("euleros-2.0-sp10", "x86_64", "EulerOS 2.0 (SP10): yum install -y docker-engine"),
    ("openeuler-22.03", "x86_64", "openEuler 22.03 (LTS-SP1): yum install -y docker-engine"),
    ("centos-7", "x86_64", "CentOS Linux 7 (Core): yum install -y docker-engine"),
])
def test_docker_install_fix_follows_the_hosts_os_family_and_architecture(case, arch, command):
    facts = replace(HEALTHY, arch=arch, os_release=_release(case), docker=None, missing_tools=("docker",))
    (finding,) = by_name(check_host(ASCEND, facts), "docker")
    assert finding.fix == f"install docker ({command}) and run: systemctl enable --now docker"
    assert (".aarch64" in finding.fix) == (arch == "aarch64" and "yum" in command)


@pytest.mark.parametrize("release", [None, "alpine-3.20"])
def test_docker_install_fix_on_an_unknown_os_links_dockers_install_page(release):
    facts = replace(HEALTHY, os_release=release and _release(release), docker=None, missing_tools=("docker",))
    (finding,) = by_name(check_host(ASCEND, facts), "docker")
    assert "https://docs.docker.com/engine/install/" in finding.fix
    assert "yum" not in finding.fix and "apt-get" not in finding.fix
    assert ("Alpine Linux v3.20" in finding.fix) == (release is not None)


def test_ssh_fix_is_the_real_command_and_a_local_host_has_no_ssh():
    from deployctl.spec.model import Host, SshSettings

    down = HostFacts(reachable=False, error="cannot connect to 10.200.0.11:22: connection refused")
    host = Host("tb1", "10.200.0.11", SshSettings(user="root", port=22))
    (ssh,) = check_host(ASCEND, down, host=host)
    assert ssh.fix == ("check the host's address, port, user and key (ssh -p 22 root@10.200.0.11) and its "
                       "known_hosts entry")
    jumped = Host("n2", "192.0.2.12", SshSettings(user="ma-user", port=2222, identity_file="/k/id ed",
                                                  jump="bastion:22"))
    (ssh,) = check_host(ASCEND, down, host=jumped)
    assert "(ssh -p 2222 -i '/k/id ed' -J bastion:22 ma-user@192.0.2.12)" in ssh.fix
    assert "PORT" not in check_host(ASCEND, down)[0].fix

    local = check_host(ASCEND, HEALTHY, host=Host("here", "local"))
    assert (local[0].name, local[0].status, local[0].observed) == ("ssh", "PASS", "local (no SSH)")
    remote = check_host(ASCEND, HEALTHY, host=host)
    assert (remote[0].observed, remote[0].expected) == ("connected", "reachable over SSH")
