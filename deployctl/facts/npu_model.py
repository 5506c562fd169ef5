"""What npu-smi says about a host's NPUs, as frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
