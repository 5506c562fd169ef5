"""The probe list as data, and probe outputs assembled into HostFacts (no host involved)."""

from __future__ import annotations

from pathlib import Path

from deployctl.facts.assemble import ProbeOutput, host_facts_from
from deployctl.facts.probes import container_inspect_probe, probes_for
from deployctl.doctor.checks import check_host
from deployctl.spec.model import Requirements

FORMATS = Path(__file__).parent.parent / "fixtures" / "formats"


def sample(case: str) -> ProbeOutput:
    folder = FORMATS / case
    read = lambda name: (folder / name).read_text() if (folder / name).exists() else ""  # noqa: E731
    return ProbeOutput(int(read("exit_code.txt")), read("stdout.txt"), read("stderr.txt"))


def test_ascend_disaggregated_probe_argv():
    probes = probes_for("ascend", (4, 5), "/mnt", disaggregated=True)
    assert [p.argv for p in probes] == [
        ("npu-smi", "info"),
        ("npu-smi", "info", "-l"),
        ("npu-smi", "info", "-t", "board", "-i", "4"),
        ("cat", "/usr/local/Ascend/driver/version.info"),
        ("cat", "/etc/hccn.conf"),
        ("/usr/local/Ascend/driver/tools/hccn_tool", "-i", "4", "-ip", "-g"),
        ("/usr/local/Ascend/driver/tools/hccn_tool", "-i", "4", "-link", "-g"),
        ("/usr/local/Ascend/driver/tools/hccn_tool", "-i", "4", "-tls", "-g"),
        ("/usr/local/Ascend/driver/tools/hccn_tool", "-i", "5", "-ip", "-g"),
        ("/usr/local/Ascend/driver/tools/hccn_tool", "-i", "5", "-link", "-g"),
        ("/usr/local/Ascend/driver/tools/hccn_tool", "-i", "5", "-tls", "-g"),
        ("uname", "-m"),
        ("cat", "/etc/os-release"),
        ("docker", "version", "--format", "{{json .}}"),
        ("sysctl", "-n", "net.ipv4.ip_forward"),
        ("docker", "ps", "--no-trunc", "--format", "{{json .}}"),
        ("df", "-Pk", "/mnt"),
    ]
    assert all(isinstance(word, str) for p in probes for word in p.argv)


def test_gpu_probes_parse_their_noheader_output():
    probes = {p.key: p for p in probes_for("gpu", (0,), None)}
    assert "npu_info" not in probes and "disk" not in probes
    assert "docker_info" in probes  # the runtimes, for nvidia_runtime; NPU hosts are not asked (nothing reads it)
    gpus = probes["gpus"].parse("0, NVIDIA H100 80GB HBM3, GPU-5f0c2d4e, 81559, 0, 580.159.04\n")
    assert (gpus[0].memory_total_mib, gpus[0].driver_version, gpus[0].uuid) == (81559, "580.159.04", "GPU-5f0c2d4e")


def test_outputs_assemble_into_facts_the_checks_pass():
    by_key = {p.key: p for p in probes_for("ascend", (4,), "/mnt/weights", disaggregated=True)}
    outputs = {
        "npu_info": sample("npu-smi/info-910b3-8x64g-healthy-23.0.6"),
        "npu_count": sample("npu-smi/info-l-8cards"),
        "board:4": sample("npu-smi/board-i1-23.0.6"),
        "version_info": sample("files/driver-version-info-23.0.6"),
        # NPU 4's live IP (the dev0 sample) is its /etc/hccn.conf entry too: a stale entry FAILs hccn_conf
        "hccn_conf": ProbeOutput(0, sample("files/hccn-conf-8dev").stdout.replace("address_4=198.51.100.15",
                                                                                "address_4=198.51.100.11")),
        "hccn_ip:4": sample("hccn_tool/ip-g-dev0"),
        "hccn_link:4": sample("hccn_tool/link-g-up"),
        "hccn_tls:4": sample("hccn_tool/tls-g-switch"),
        "arch": sample("system/uname-m"),
        "docker_version": sample("system/docker-version-json"),
        "ip_forward": ProbeOutput(0, "1\n"),
        "container_list": sample("system/docker-ps-json"),
        "disk": sample("system/df-pk-weights"),
    }
    results = [(by_key[key], output) for key, output in outputs.items()]
    results.append((container_inspect_probe(("3f2a9c1d7e4b", "9e8d7c6b5a41", "51c0ffee2b3a")),
                    sample("system/docker-inspect-npu-holders")))
    facts = host_facts_from(results, disk_path="/mnt/weights")
    assert (facts.arch, facts.npu.card_count, facts.ip_forward, facts.probe_errors) == ("aarch64", 8, 1, ())
    assert [c.name for c in facts.containers] == ["llama2-13b-pd-prefill-0", "alice-dev", "bench-old"]
    assert facts.hccn_device(4).ip.ipaddr == "198.51.100.11" and facts.hccn_device(4).link.up
    requirements = Requirements(driver="23.0.6", cards=8, npu_memory_gb=64, free_disk_gb=60)
    findings = check_host(requirements, facts, devices_used=(4,), own_deployment="llama2-13b-pd", disaggregated=True)
    assert {f.status for f in findings} == {"PASS", "SKIP"}  # SKIP: hccn_ping (no peers asked)


def test_failures_become_missing_tools_and_probe_errors():
    by_key = {p.key: p for p in probes_for("ascend", (5,), None, disaggregated=True)}
    facts = host_facts_from([
        (by_key["npu_info"], sample("npu-smi/info-dcmi-init-failed-8005")),
        (by_key["hccn_ip:5"], sample("hccn_tool/ip-g-no-ip-configured")),
        (by_key["docker_version"], sample("system/docker-version-json-daemon-down")),
        (by_key["version_info"], ProbeOutput(127, "", "sh: cat: command not found\n")),
        (by_key["ip_forward"], ProbeOutput(0, "garbage\n")),
        (by_key["container_list"], ProbeOutput(0, "")),
    ])
    assert (facts.npu.error, facts.npu.dcmi_ret) == ("dcmi module initialize failed", -8005)
    assert facts.docker.server is None
    assert facts.docker_error == "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    assert facts.missing_tools == ("cat",)
    assert facts.probe_error("hccn_ip") == "Get ipconf failed, because no ip was preset there!"
    assert facts.probe_error("ip_forward") == "sysctl -n: cannot parse line 1: 'garbage' (expected the value as an integer)"
    assert facts.containers == () and facts.hccn is None
