"""What the vendor tools told us about a host, as frozen dataclasses (parsed, never raw text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the states import this module's types; annotations only, no cycle at run time
    from deployctl.facts.deployed import DeployedState
    from deployctl.facts.image_state import HostImage
    from deployctl.ranktable.host_address import HostAddresses
    from deployctl.weights.manifest import HostState

# --- hccn_tool and /etc/hccn.conf -------------------------------------------------------------


@dataclass(frozen=True)
class HccnIp:
    """`hccn_tool -i N -ip -g`: the live RoCE address of one NPU."""

    ipaddr: str
    netmask: str


@dataclass(frozen=True)
class HccnDeviceConf:
    """One device's keys in /etc/hccn.conf (`address_N`, ...); None where the file does not set it."""

    device_id: int
    address: Optional[str] = None
    netmask: Optional[str] = None
    netdetect: Optional[str] = None
    gateway: Optional[str] = None
    send_arp_status: Optional[int] = None
    tls_enable: Optional[int] = None


@dataclass(frozen=True)
class HccnConf:
    """/etc/hccn.conf: the boot-time RoCE config per physical device id."""

    devices: tuple[HccnDeviceConf, ...]

    def address(self, device_id: int) -> Optional[str]:
        """The configured `address_N`, or None when the file has none for that device."""
        for device in self.devices:
            if device.device_id == device_id:
                return device.address
        return None


@dataclass(frozen=True)
class HccnLink:
    status: str  # UP | DOWN (as printed)

    @property
    def up(self) -> bool:
        return self.status.upper() == "UP"


@dataclass(frozen=True)
class HccnTls:
    device_id: Optional[int]
    enabled: bool
    preconfigured: Optional[bool] = None
    alarm_days: Optional[int] = None


@dataclass(frozen=True)
class HccnPing:
    device_id: Optional[int]
    target: str
    transmitted: int
    received: int
    loss_pct: float

    @property
    def reachable(self) -> bool:
        return self.received > 0


@dataclass(frozen=True)
class HccnDeviceFacts:
    """What the live hccn_tool said about one device (None: not asked, or the tool failed)."""

    device_id: int
    ip: Optional[HccnIp] = None
    link: Optional[HccnLink] = None
    tls: Optional[HccnTls] = None


# --- npu-smi ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpuProcess:
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class NpuChip:
    """One NPU row pair of `npu-smi info` plus the processes listed for it."""

    npu_id: int
    chip_id: int
    name: str
    health: str  # OK | Warning | Alarm | Critical | UNKNOWN
    power_w: Optional[float]
    temp_c: Optional[int]
    hugepages_used_pages: Optional[int]
    hugepages_total_pages: Optional[int]
    bus_id: str
    aicore_pct: Optional[int]
    memory_used_mb: Optional[int]
    memory_total_mb: Optional[int]
    hbm_used_mb: Optional[int]
    hbm_total_mb: Optional[int]
    processes: tuple[NpuProcess, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.health == "OK"


@dataclass(frozen=True)
class NpuSmiInfo:
    """`npu-smi info`. When the driver cannot be initialised (dcmi failure) `error` is set and there
    are no chips: that is a state of the host the doctor reports, not a parse failure."""

    npu_smi_version: Optional[str]
    driver_version: Optional[str]
    chips: tuple[NpuChip, ...] = ()
    trailing_warning: Optional[str] = None
    error: Optional[str] = None  # e.g. "dcmi module initialize failed"
    dcmi_ret: Optional[int] = None  # e.g. -8005

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def npu_ids(self) -> tuple[int, ...]:
        return tuple(sorted({chip.npu_id for chip in self.chips}))

    @property
    def card_count(self) -> int:
        return len(self.npu_ids)

    @property
    def unhealthy(self) -> tuple[NpuChip, ...]:
        return tuple(chip for chip in self.chips if not chip.healthy)

    @property
    def busy_npu_ids(self) -> tuple[int, ...]:
        return tuple(sorted({chip.npu_id for chip in self.chips if chip.processes}))

    @property
    def free_npu_ids(self) -> tuple[int, ...]:
        busy = set(self.busy_npu_ids)
        return tuple(npu for npu in self.npu_ids if npu not in busy)

    @property
    def hbm_total_mb_per_card(self) -> Optional[int]:
        """The smallest HBM total over the cards (a mixed host is only as big as its smallest card)."""
        totals = [chip.hbm_total_mb for chip in self.chips if chip.hbm_total_mb is not None]
        return min(totals) if totals else None

    def chip(self, npu_id: int) -> Optional[NpuChip]:
        for chip in self.chips:
            if chip.npu_id == npu_id:
                return chip
        return None


@dataclass(frozen=True)
class NpuCount:
    """`npu-smi info -l`: the card count and ids."""

    total_count: int
    npu_ids: tuple[int, ...]
    chip_counts: tuple[int, ...]  # per npu_ids entry


@dataclass(frozen=True)
class NpuBoard:
    """`npu-smi info -t board -i N`: versions and identity of one card."""

    npu_id: int
    software_version: str  # the NPU driver version
    firmware_version: str
    compatibility: Optional[str] = None  # OK | NOK | UNKNOWN | NOT SUPPORT
    product_name: Optional[str] = None
    serial_number: Optional[str] = None
    pci_device_id: Optional[str] = None
    chip_count: Optional[int] = None


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
    bound_addresses: Optional["HostAddresses"] = None  # a `local` host's own IPv4 addresses (ranktable server_ip)

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
