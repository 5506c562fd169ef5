"""The spec's servers grouped as Kubernetes schedules them (pure): a pod per host of a DP group, a gang per
group (scheduled together) or per independent instance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from deployctl.servers.vllm_ascend.groups import DpGroup
from deployctl.spec.model import Instance, Spec


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
    group: Optional[DpGroup] = None

    @property
    def leader(self) -> Pod:
        return self.pods[0]


def gangs(spec: Spec) -> tuple[Gang, ...]:
    """Every serving gang in spec order; the front (scheduler, proxy) is not one."""
    if spec.upstream is None:
        return tuple(Gang(i.name, i.role, (Pod(i.name, (i,), 0),), i.path)
                     for i in spec.instances if i.role in ("mixed", "prefill", "decode"))
    out = []
    for group in spec.upstream.groups:
        mine = [i for i in spec.instances if i.server is not None and i.server.group == group]
        pods = []
        for h, host in enumerate(group.hosts):
            on = tuple(i for i in mine if i.host == host)
            pods.append(Pod(on[0].name if len(on) == 1 else f"{spec.name}-{group.label}-{host}", on, h))
        out.append(Gang(f"{spec.name}-{group.label}", group.role, tuple(pods), mine[0].path, group))
    return tuple(out)


def proxy(spec: Spec) -> Optional[Instance]:
    found = spec.role("proxy")
    return found[0] if found else None
