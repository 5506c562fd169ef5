"""The flavours keyed by (platform, server), as vLLM keys its platforms (pure). Adding a flavour: its module, one
line here, and its `server` value in spec/schema.json."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from deployctl.servers.ascendcloud import AscendCloudVllm
from deployctl.servers.base import Flavour
from deployctl.servers.fields import Refused
from deployctl.servers.sglang import SglangGpu
from deployctl.servers.sglang.ascend import SglangAscend
from deployctl.servers.triton import TritonVllm
from deployctl.servers.vllm_ascend import VllmAscend
from deployctl.servers.vllm_gpu import VllmGpu

if TYPE_CHECKING:
    from deployctl.spec.model import Spec

FLAVOURS: dict[tuple[str, str], Flavour] = {
    (f.platform, f.server): f for f in (AscendCloudVllm(), VllmAscend(), VllmGpu(), TritonVllm(), SglangGpu(),
                                        SglangAscend())
}


def _claimed(flavour: Flavour) -> tuple:
    """The other servers' claimed values this flavour's table does not refuse yet, as rows it refuses them by."""
    rows = dict.fromkeys(row for other in FLAVOURS.values() if other.server != flavour.server
                         for row in other.claims)
    return tuple(row for row in rows if not any(isinstance(mine, Refused) and mine.field == row.field
                                                and any(mine.refuses(v) for v in row.values or ())
                                                for mine in flavour.table))


# once, at import: a flavour's table is then all it refuses (validate, the field-table test)
for _flavour in FLAVOURS.values():
    _flavour.table = _flavour.table + _claimed(_flavour)


def flavour_for(platform: str, server: str) -> Optional[Flavour]:
    """The flavour that runs `server` on `platform`, or None where that pair does not exist."""
    return FLAVOURS.get((platform, server))


def flavour_named(platform: str, server: str) -> Flavour:
    """The flavour whose rules a spec is checked by: its (platform, server), else the server's own on its own
    platform (validate reports the platform separately), else the default server's for the platform."""
    found = flavour_for(platform, server)
    if found is not None:
        return found
    same_server = [f for f in FLAVOURS.values() if f.server == server]
    return same_server[0] if same_server else FLAVOURS.get((platform, "vllm"), FLAVOURS[("ascend", "vllm")])


def platforms_of(server: str) -> tuple[str, ...]:
    return tuple(f.platform for f in FLAVOURS.values() if f.server == server)


def flavour_of(spec: "Spec") -> Flavour:
    """The flavour of a loaded (valid) spec."""
    return flavour_named(spec.platform, spec.server)


def options_of(kind: str) -> dict[str, str]:
    """Every flavour's `kind` mapping (topology_options, instance_options, port_keys) merged, in registry order."""
    return {key: what for f in FLAVOURS.values() for key, what in getattr(f, kind).items()}


def readers_of(key: str) -> str:
    """The servers that read an option key, as validate names them ("sglang", "triton or sglang")."""
    return " or ".join(dict.fromkeys(f.server for f in FLAVOURS.values()
                                     if key in {**f.topology_options, **f.instance_options, **f.port_keys}))
