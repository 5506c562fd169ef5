"""Pods and gangs as data (what a flavour's `export_gangs` returns); no flavour is asked here, so a flavour may
import this (export/gangs.py asks them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deployctl.spec.model import Instance


@dataclass(frozen=True)
class Pod:
    """One pod: the servers `up` runs on one host for one group (several only for external DP launch)."""

    name: str  # the instance's name, or <deployment>-<group>-<host> when it runs several
    instances: tuple[Instance, ...]
    host_index: int  # its host's position in the group: 0 is the leader (the DP master, the API server)

    @property
    def host(self) -> str:
        return self.instances[0].host


@dataclass(frozen=True)
class Gang:
    """Pods that start and restart together: one DP group, or one AscendCloud/GPU instance."""

    name: str
    role: str  # mixed | prefill | decode
    pods: tuple[Pod, ...]  # leader first, then the group's other hosts in spec order
    path: tuple  # where it sits in the spec
    # how a pod's NPU count comes about: (the key under `path` that sets it, what it is); None: each instance's
    # devices
    npus: Optional[tuple[str, str]] = None
    # (host, the ports its servers bind there that `up` reserves out of the ephemeral range), per host
    kv_ports: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def leader(self) -> Pod:
        return self.pods[0]
