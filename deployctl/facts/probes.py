"""The probes the doctor and `up` run on a host, as data: argv words plus the pure parser of their stdout.

Gathering (running them over a transport) lives elsewhere; `facts.assemble.host_facts_from` turns the
outputs into HostFacts. Keys name the HostFacts field a probe feeds (`board:N`, `hccn_ip:N` per device)."""

from __future__ import annotations

import functools
from typing import Optional

from deployctl.facts import docker, files, hccn_tool, npu_smi, nvidia_smi, system
from deployctl.facts.probe import Probe

NPU_SMI = "npu-smi"
HCCN_TOOL = hccn_tool.HCCN_TOOL_PATH  # the doctor checks the vendor's install location itself
JSON = "{{json .}}"
OS_RELEASE = "/etc/os-release"
GPU_QUERY = ("index", "name", "uuid", "memory.total", "memory.used", "driver_version")
APP_QUERY = ("gpu_uuid", "pid", "process_name", "used_memory")


def _hccn(device: int, what: str, parse) -> Probe:
    return Probe((HCCN_TOOL, "-i", str(device), f"-{what}", "-g"), parse, f"hccn_{what}:{device}")


def npu_count_probes() -> tuple[Probe, ...]:
    """What counts a host's NPUs (HostFacts.npus_counted): `npu-smi info` and `npu-smi info -l`."""
    return (Probe((NPU_SMI, "info"), npu_smi.parse_npu_smi_info, "npu_info", parse_failed_output=True),
            Probe((NPU_SMI, "info", "-l"), npu_smi.parse_npu_smi_count, "npu_count"))


def npu_probes(devices: tuple[int, ...], *, disaggregated: bool = False) -> tuple[Probe, ...]:
    boards = devices[:1] or (0,)  # one card's board answers for the host's driver and firmware
    probes = [
        *npu_count_probes(),
        *(Probe((NPU_SMI, "info", "-t", "board", "-i", str(d)), npu_smi.parse_npu_smi_board, f"board:{d}")
          for d in boards),
        Probe(("cat", files.VERSION_INFO), files.parse_version_info, "version_info"),
    ]
    if disaggregated:
        probes.append(Probe(("cat", files.HCCN_CONF), files.parse_hccn_conf, "hccn_conf"))
        for device in devices:
            probes += [_hccn(device, "ip", hccn_tool.parse_hccn_ip), _hccn(device, "link", hccn_tool.parse_hccn_link),
                       _hccn(device, "tls", hccn_tool.parse_hccn_tls)]
    return tuple(probes)


def gpu_count_probe() -> Probe:
    """What lists a host's GPUs (HostFacts.gpus): nvidia-smi's GPU query."""
    gpus = ("nvidia-smi", f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader,nounits")
    return Probe(gpus, functools.partial(nvidia_smi.parse_nvidia_smi_query_gpu, fields=GPU_QUERY), "gpus")


def gpu_probes() -> tuple[Probe, ...]:
    apps = ("nvidia-smi", f"--query-compute-apps={','.join(APP_QUERY)}", "--format=csv,noheader,nounits")
    return (
        gpu_count_probe(),
        Probe(apps, functools.partial(nvidia_smi.parse_nvidia_smi_compute_apps, fields=APP_QUERY), "gpu_apps"),
        # the runtimes: only the nvidia_runtime check reads them (each docker CLI start costs the host ~40 ms)
        Probe(("docker", "info", "--format", JSON), docker.parse_docker_info, "docker_info"),
    )


def host_probes(disk_path: Optional[str]) -> tuple[Probe, ...]:
    probes = [
        Probe(("uname", "-m"), system.parse_uname_machine, "arch"),
        Probe(("cat", OS_RELEASE), system.parse_os_release, "os_release"),  # which install commands to suggest
        Probe(("docker", "version", "--format", JSON), docker.parse_docker_version, "docker_version",
              parse_failed_output=True),
        Probe(("sysctl", "-n", system.IP_FORWARD), system.parse_sysctl_value, "ip_forward"),
        Probe(("docker", "ps", "--no-trunc", "--format", JSON), docker.parse_docker_ps, "container_list"),
    ]
    if disk_path:
        # df fails on a path that does not exist yet: pass the nearest existing parent of weights.dest
        probes.append(Probe(("df", "-Pk", disk_path), system.parse_df, "disk"))
    return tuple(probes)


def probes_for(
    platform: str, devices: tuple[int, ...], disk_path: Optional[str], *, disaggregated: bool = False
) -> tuple[Probe, ...]:
    """Every probe one host needs; run `container_inspect_probe` afterwards on what `container_list` found."""
    accelerator = gpu_probes() if platform == "gpu" else npu_probes(devices, disaggregated=disaggregated)
    return accelerator + host_probes(disk_path)


def container_inspect_probe(container_ids: tuple[str, ...]) -> Probe:
    """`docker inspect` of the running containers: which /dev/davinciN (or GPUs) each holds, and labels."""
    return Probe(("docker", "inspect", *container_ids), docker.parse_docker_inspect, "containers")


def hccn_ping_probe(device: int, address: str) -> Probe:
    """Ping a peer device's RoCE IP from one of this host's NPUs (the pairs come from the spec)."""
    argv = (HCCN_TOOL, "-i", str(device), "-ping", "-g", "address", address)
    return Probe(argv, hccn_tool.parse_hccn_ping, f"hccn_ping:{device}:{address}")
