"""What the vendor tools told us about a host, as frozen dataclasses (parsed, never raw text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional

from deployctl.facts.hccn_model import HccnConf, HccnDeviceFacts, HccnPing
from deployctl.facts.npu_model import NpuBoard, NpuCount, NpuSmiInfo

if TYPE_CHECKING:  # the states import this module's types; annotations only, no cycle at run time
    from deployctl.facts.deployed import DeployedState
    from deployctl.facts.image_state import HostImage
    from deployctl.facts.host_layout import HostLayout
    from deployctl.facts.host_tuning import HostTuning
    from deployctl.facts.listening import Listening
    from deployctl.facts.liveness import Answer
    from deployctl.facts.progress import NewLines, ServerProgress
    from deployctl.ranktable.host_address import HostAddresses
    from deployctl.weights.manifest import HostState


# --- files ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DriverVersionInfo:
    """/usr/local/Ascend/driver/version.info."""

    version: str
    package_version: Optional[str] = None
    compatible_firmware_range: Optional[tuple[str, str]] = None


# --- system and docker ------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerVersion:
    """`docker version --format '{{json .}}'`; `server` is None when the daemon is not reachable."""

    client: Optional[str]
    server: Optional[str]
    client_api: Optional[str] = None
    server_api: Optional[str] = None


@dataclass(frozen=True)
class DockerInfo:
    """`docker info --format '{{json .}}'` (the keys deployctl uses)."""

    server_version: Optional[str]
    architecture: Optional[str]
    ip_forwarding: Optional[bool]
    runtimes: tuple[str, ...]
    default_runtime: Optional[str]
    docker_root_dir: Optional[str]


# os-release IDs (ID, ID_LIKE) of each family whose install commands doctor's fixes know
DEBIAN_IDS = ("debian", "ubuntu")
EULER_IDS = ("euleros", "hce", "openeuler", "centos", "rhel", "fedora")


@dataclass(frozen=True)
class OsRelease:
    """`/etc/os-release`: which distribution a host runs (ID, ID_LIKE), for install hints."""

    id: str
    id_like: tuple[str, ...] = ()
    version_id: Optional[str] = None
    pretty_name: Optional[str] = None

    @property
    def family(self) -> Optional[str]:
        """`debian` (apt-get), `euler` (yum: EulerOS, HCE, openEuler, CentOS), or None when unknown."""
        ids = (self.id.lower(), *(like.lower() for like in self.id_like))
        for family, known in (("debian", DEBIAN_IDS), ("euler", EULER_IDS)):
            if any(i in known for i in ids):
                return family
        return None


@dataclass(frozen=True)
class DiskFree:
    """`df -Pk PATH`: the filesystem holding PATH."""

    filesystem: str
    total_bytes: int
    used_bytes: int
    available_bytes: int
    mounted_on: str


@dataclass(frozen=True)
class ContainerSummary:
    """One line of `docker ps --format '{{json .}}'`."""

    id: str
    name: str
    image: str
    state: Optional[str]
    status: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ContainerDevices:
    """From `docker inspect`: a container's state, image, labels and the accelerators it holds."""

    id: str
    name: str
    running: bool
    labels: tuple[tuple[str, str], ...]
    device_paths: tuple[str, ...]  # HostConfig.Devices[].PathOnHost
    npu_ids: tuple[int, ...]  # from /dev/davinciN and ASCEND_VISIBLE_DEVICES
    gpu_ids: tuple[str, ...] = ()  # HostConfig.DeviceRequests ids; ("all",) for --gpus all
    state: str = "unknown"  # running | exited | created | restarting | paused | dead
    exit_code: int = 0
    image_id: str = ""
    image: str = ""  # the name it was started from
    started_at: Optional[float] = None  # State.StartedAt as epoch seconds (the host's clock); None: never or unknown

    def label(self, key: str) -> Optional[str]:
        for name, value in self.labels:
            if name == key:
                return value
        return None


# --- nvidia-smi -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    """One `--query-gpu` row; a field not queried (or `[N/A]`) is None."""

    index: Optional[int] = None
    name: Optional[str] = None
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    driver_version: Optional[str] = None
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    utilization_gpu_pct: Optional[int] = None
    temperature_c: Optional[int] = None
    power_draw_w: Optional[float] = None
    compute_mode: Optional[str] = None


@dataclass(frozen=True)
class GpuProcess:
    """One `--query-compute-apps` row."""

    gpu_uuid: Optional[str]
    pid: int
    process_name: Optional[str]
    used_memory_mib: Optional[int]


# --- one host ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFacts:
    """Everything the doctor rules read about one host. None = unknown (not gathered, or the probe
    failed); `missing_tools` names tools that exited 127 and `probe_errors` says why others failed."""

    reachable: bool = True
    error: Optional[str] = None  # why the host could not be reached
    arch: Optional[str] = None
    os_release: Optional[OsRelease] = None
    npu: Optional[NpuSmiInfo] = None
    npu_count: Optional[NpuCount] = None
    boards: Optional[tuple[NpuBoard, ...]] = None
    driver_files: Optional[DriverVersionInfo] = None
    docker: Optional[DockerVersion] = None
    docker_error: Optional[str] = None  # stderr of `docker version` when the daemon is down
    docker_info: Optional[DockerInfo] = None
    ip_forward: Optional[int] = None
    disk: Optional[DiskFree] = None
    disk_path: Optional[str] = None
    containers: Optional[tuple[ContainerDevices, ...]] = None
    hccn: Optional[tuple[HccnDeviceFacts, ...]] = None
    hccn_conf: Optional[HccnConf] = None
    hccn_pings: Optional[tuple[HccnPing, ...]] = None
    gpus: Optional[tuple[GpuInfo, ...]] = None
    gpu_processes: Optional[tuple[GpuProcess, ...]] = None
    missing_tools: tuple[str, ...] = ()
    probe_errors: tuple[tuple[str, str], ...] = ()  # (probe key, message)
    # what `up`, `plan`, `status` and `down` read (facts/deployed.py, image_state.py, weights_state.py)
    deployed: Optional["DeployedState"] = None
    image: Optional["HostImage"] = None
    weights: Optional["HostState"] = None
    compile_cache: Optional[Mapping[str, str]] = None  # sealed compile-cache key directories -> their digest
    bound_addresses: Optional["HostAddresses"] = None  # a host's own IPv4 addresses (server_ip, vllm-ascend's NIC)
    listening: Optional["Listening"] = None  # its listening TCP ports and ephemeral range (doctor's port checks)
    tuning: Optional["HostTuning"] = None  # swappiness, numa balancing, CPU governors (vllm-ascend hosts)
    liveness: Optional[Mapping[int, "Answer"]] = None  # port -> its one-token generate (status: hung or not)
    deployment_files: Optional[tuple[str, ...]] = None  # which of the deployment's own paths exist (`down`)
    layout: Optional["HostLayout"] = None  # its /dev/davinciN and /usr/local/dcmi (vllm-ascend containers)
    image_version: Optional[str] = None  # the version the spec's image names in its history (vllm-ascend)
    front_list: Optional[Mapping[str, str]] = None  # the running front's servers (address:port -> role), its host
    progress: Optional[Mapping[int, "ServerProgress"]] = None  # port -> health code and /metrics (`watch`)
    new_log_lines: Optional[Mapping[str, "NewLines"]] = None  # container -> its log lines since a stamp (`watch`)

    def npus_counted(self) -> Optional[int]:
        """Its NPUs: `npu-smi info -l`'s count, else the `npu-smi info` table's cards; None where neither says."""
        if self.npu_count is not None:
            return self.npu_count.total_count
        return self.npu.card_count if self.npu is not None else None

    def probe_error(self, key: str) -> Optional[str]:
        for name, message in self.probe_errors:
            if name == key:
                return message
        return None

    def hccn_device(self, device_id: int) -> Optional[HccnDeviceFacts]:
        for device in self.hccn or ():
            if device.device_id == device_id:
                return device
        return None
