"""Build ranktables from device ids and device IPs: one host's files (vendor `gen`) or a whole spec's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from deployctl.errors import Problem, RanktableError
from deployctl.ranktable.merge import refuse_duplicates
from deployctl.ranktable.rules import MAX_HOST_CARDS, npu_reused, requested_device_problem, tp_mismatch, tp_problem
from deployctl.ranktable.model import (
    DECODE,
    MERGED_FILE_NAME,
    PREFILL,
    SCHEDULER,
    Device,
    Group,
    LocalRanktable,
    Ranktable,
    Server,
    global_file_name,
    host_file_name,
    local_file_name,
    to_json,
)

if TYPE_CHECKING:
    from deployctl.spec.model import Instance, Spec


@dataclass(frozen=True)
class HostRanktables:
    """What the vendor tool writes on one host: its global file and one local file per instance."""

    host_ip: str
    global_ranktable: Ranktable
    locals: tuple[tuple[str, LocalRanktable], ...]  # (file name, content), prefill, decode, then `_host`

    @property
    def global_name(self) -> str:
        return global_file_name(self.host_ip)

    def files(self) -> dict[str, str]:
        """File name -> exact file text, the global first."""
        return {self.global_name: to_json(self.global_ranktable), **{n: to_json(t) for n, t in self.locals}}


@dataclass(frozen=True)
class SpecRanktables:
    """Every ranktable a disaggregated spec needs: the merged global and each host's local files."""

    global_ranktable: Ranktable
    local_files: Mapping[str, Mapping[str, str]]  # host name -> file name -> text
    instance_files: Mapping[str, str]  # container name -> its local file name (RANK_TABLE_FILE_PATH)

    global_name = MERGED_FILE_NAME

    @property
    def global_json(self) -> str:
        return to_json(self.global_ranktable)


def instance_server(host_ip: str, device_ids: Sequence[int], device_ips: Mapping[int, str], where: str = "") -> Server:
    """One instance's entry: physical ids, their IPs, logical rank ids from 0."""
    missing = [d for d in device_ids if d not in device_ips]
    if missing:
        raise RanktableError(f"{where or host_ip}: NPU {missing[0]}: no device IP")
    devices = tuple(Device(str(d), device_ips[d], str(rank)) for rank, d in enumerate(device_ids))
    return Server(host_ip, host_ip, devices)


def check_request(host_ip: str, prefill: Sequence[tuple[int, ...]], decode: Sequence[tuple[int, ...]],
                  cards: Optional[int] = None) -> None:
    """Refuse server lists whose files `ranktable validate` would refuse: its rule functions, its messages.

    Runs before any device IP is gathered or file written; each problem names the flag and the instance.
    """
    problems: list[Problem] = []
    first_npu: dict[int, str] = {}
    first_tp: Optional[tuple[int, str]] = None
    for role, flag, instances in (("prefill", "--prefill-server-list", prefill),
                                  ("decode", "--decode-server-list", decode)):
        for index, devices in enumerate(instances):
            where = f"{role} instance {index + 1} ({','.join(map(str, devices))})"
            found = [] if devices else [f"a {role} instance needs at least one device"]
            for device in devices:
                found.append(requested_device_problem(device, cards))
                if device in first_npu:
                    found.append(npu_reused(str(device), host_ip, first_npu[device]))
                first_npu.setdefault(device, where)
            found.append(tp_problem(len(devices)))
            if devices and first_tp is None:
                first_tp = (len(devices), where)
            elif devices and first_tp[0] != len(devices):
                found.append(tp_mismatch(len(devices), *first_tp))
            problems += [Problem((where,), message, file=flag) for message in found if message]
    if problems:
        count = len(problems)
        unknown = cards is None and any(d >= MAX_HOST_CARDS for devices in (*prefill, *decode) for d in devices)
        raise RanktableError(f"refused: {count} problem{'s' if count != 1 else ''} in the server lists; "
                             "no file written", problems,
                             hint="pass --cards N with this host's NPU count" if unknown else None)


def build_host_ranktables(
    host_ip: str,
    prefill: Sequence[tuple[int, ...]],
    decode: Sequence[tuple[int, ...]],
    api_server: bool,
    device_ips: Mapping[int, str],
    cards: Optional[int] = None,
) -> HostRanktables:
    """The files `pd_ranktable_tools.py --mode gen` writes on the host `host_ip`."""
    if not (prefill or decode or api_server):
        raise RanktableError("nothing to generate: give --prefill-server-list, --decode-server-list or --api-server")
    check_request(host_ip, prefill, decode, cards)
    groups: list[Group] = []
    locals_: list[tuple[str, LocalRanktable]] = []
    if api_server:
        groups.append(Group(SCHEDULER, (Server(host_ip, host_ip),)))
    for group_id, instances in ((PREFILL, prefill), (DECODE, decode)):
        if not instances:
            continue  # the vendor tool writes only the groups asked for on this host
        servers = tuple(instance_server(host_ip, devices, device_ips) for devices in instances)
        groups.append(Group(group_id, servers))
        locals_ += [(local_file_name(host_ip, s.device_ids), LocalRanktable(s)) for s in servers]
    if api_server:
        locals_.append((host_file_name(host_ip), LocalRanktable(Server(host_ip, host_ip))))
    refuse_name_clash([name for name, _ in locals_], host_ip)
    return HostRanktables(host_ip, Ranktable(tuple(groups)), tuple(locals_))


def refuse_name_clash(names: Sequence[str], where: str) -> None:
    """Ids joined without a separator can collide (1,12 and 11,2 are both `112`): refuse, never overwrite."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RanktableError(f"{where}: two instances would both write {name}",
                                 hint="the vendor file name joins device ids without a separator; pick other ids")
        seen.add(name)


def build_global_for_spec(
    spec: Spec,
    device_ips: Mapping[str, Mapping[int, str]],
    server_ips: Mapping[str, str],
) -> SpecRanktables:
    """Every ranktable of a disaggregated spec, in spec order (the order NODE_PORTS follows).

    device_ips: host name -> NPU id -> device IP; server_ips: host name -> the address bound on that host.
    """
    if spec.mode != "disaggregated" or spec.scheduler is None:
        raise RanktableError(f"{spec.name}: ranktables exist only for disaggregated specs with a scheduler")
    scheduler_ip = _server_ip(spec, spec.scheduler.host, server_ips)
    local_files: dict[str, dict[str, str]] = {}
    instance_files: dict[str, str] = {}
    groups = [Group(SCHEDULER, (Server(scheduler_ip, scheduler_ip),))]
    for group_id, role in ((PREFILL, "prefill"), (DECODE, "decode")):
        servers = tuple(_spec_instance(spec, i, device_ips, server_ips, local_files, instance_files)
                        for i in spec.role(role))
        groups.append(Group(group_id, servers))
    scheduler = spec.scheduler
    _add_local(local_files, instance_files, scheduler.host, scheduler.name,
               host_file_name(scheduler_ip), LocalRanktable(Server(scheduler_ip, scheduler_ip)))
    table = Ranktable(tuple(groups))
    refuse_duplicates([table], [spec.name])
    return SpecRanktables(table, local_files, instance_files)


def _server_ip(spec: Spec, host_name: str, server_ips: Mapping[str, str]) -> str:
    if host_name not in server_ips:
        raise RanktableError(f"{spec.host(host_name).label}: no server IP known for this host")
    return server_ips[host_name]


def _spec_instance(spec: Spec, instance: Instance, device_ips, server_ips, local_files, instance_files) -> Server:
    host = spec.host(instance.host)
    server_ip = _server_ip(spec, instance.host, server_ips)
    ips = device_ips.get(instance.host, {})
    for device in instance.devices:
        if device not in ips:
            raise RanktableError(f"{host.label}: NPU {device}: no device IP (needed by {instance.name})")
    server = instance_server(server_ip, instance.devices, ips, host.label)
    _add_local(local_files, instance_files, instance.host, instance.name,
               local_file_name(server_ip, server.device_ids), LocalRanktable(server))
    return server


def _add_local(local_files, instance_files, host: str, instance: str, name: str, local: LocalRanktable) -> None:
    files = local_files.setdefault(host, {})
    refuse_name_clash([*files, name], host)
    files[name] = to_json(local)
    instance_files[instance] = name
