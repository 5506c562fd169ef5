"""What hccn_tool and /etc/hccn.conf say about an NPU's RoCE network, as frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
