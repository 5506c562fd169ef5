"""Rules of the P/D ranktables (runbook section 4): global, per-host global, and local files."""

from __future__ import annotations

from typing import Optional

from deployctl.ranktable.model import GROUP_IDS, ROLE_OF_GROUP, SCHEDULER, STATUS, VERSION
from deployctl.ranktable.rules import Recorder, Uniques, json_path, tp_mismatch, tp_problem


class PdRules:
    """One pass over a P/D document; uniqueness and TP are judged across the whole file."""

    def __init__(self, recorder: Recorder) -> None:
        self.r = recorder
        self.npus = Uniques(recorder, "device_id unique")  # (server_ip, device_id): one NPU, one instance
        self.ips = Uniques(recorder, "device_ip unique")
        self.ranks = Uniques(recorder, "rank_id")  # keyed by (instance path, rank): each instance counts from 0
        self.tp: Optional[tuple[int, tuple]] = None  # the first instance's size and path

    def header(self, document: dict) -> None:
        self.r.expect(document, "version", (), VERSION, "version")
        self.r.expect(document, "status", (), STATUS, "status")

    def global_file(self, document: dict, *, complete_kind: bool) -> None:
        """pd-global (groups "0", "1", "2" exactly) or pd-global-partial (a subset of them, in order)."""
        self.header(document)
        groups = self.r.items(document, "server_group_list", ())
        previous = -1
        for g, group in enumerate(groups):
            if not isinstance(group, dict):
                continue
            path = ("server_group_list", g)
            group_id = self.r.string(group, "group_id", path)
            if group_id not in GROUP_IDS:
                if group_id is not None:
                    self.r.add(path + ("group_id",), "groups", f'"{group_id}", expected "0", "1" or "2"')
                continue
            order = GROUP_IDS.index(group_id)
            if order <= previous:
                self.r.add(path + ("group_id",), "groups",
                           f'group "{group_id}" after group "{GROUP_IDS[previous]}": groups are "0", "1", "2" in that order, each once')
            previous = max(previous, order)
            self.group(group, path, group_id)
        if complete_kind and len(groups) != 3:
            self.r.add(("server_group_list",), "groups", f"{len(groups)} groups, expected 3 (\"0\", \"1\", \"2\")")

    def group(self, group: dict, path: tuple, group_id: str) -> None:
        servers = self.r.items(group, "server_list", path)
        self.r.server_count(group, path, len(servers))
        for s, server in enumerate(servers):
            if not isinstance(server, dict):
                continue
            where = path + ("server_list", s)
            if group_id == SCHEDULER:
                self.scheduler(server, where)
                if s == 1:
                    self.r.add(where, "scheduler",
                               f"{len(servers)} schedulers: group \"0\" holds exactly one server")
            else:
                self.instance(server, where, ROLE_OF_GROUP[group_id])

    def scheduler(self, server: dict, path: tuple) -> None:
        self.r.string(server, "server_id", path)
        self.r.ipv4(server, "server_ip", path)
        if "device" in server:
            self.r.add(path + ("device",), "scheduler", "the scheduler entry has no devices (it uses no NPU)")

    def instance(self, server: dict, path: tuple, role: str) -> None:
        self.r.string(server, "server_id", path)
        server_ip = self.r.ipv4(server, "server_ip", path)
        devices = self.r.items(server, "device", path)
        if "device" in server and not devices and isinstance(server["device"], list):
            self.r.add(path + ("device",), "device", f"a {role} instance needs at least one device")
        size = len(devices)
        for d, device in enumerate(devices):
            if isinstance(device, dict):
                self.device(device, path + ("device", d), server_ip, size)
        if not devices:
            return
        problem = tp_problem(size)
        if problem:
            self.r.add(path + ("device",), "tp", problem)
        if self.tp is None:
            self.tp = (size, path)
        elif self.tp[0] != size:
            self.r.add(path + ("device",), "tp", tp_mismatch(size, self.tp[0], json_path(self.tp[1])))

    def device(self, device: dict, path: tuple, server_ip: Optional[str], size: int) -> None:
        device_id = self.r.device_id(device, path)
        device_ip = self.r.ipv4(device, "device_ip", path)
        rank = self.r.count(device, "rank_id", path, "rank_id")
        if device_id is not None and server_ip is not None:
            self.npus.see_npu(server_ip, device_id, path + ("device_id",))
        if device_ip is not None:
            self.ips.see(device_ip, path + ("device_ip",), device_ip)
        if rank is not None:
            if rank >= size:
                self.r.add(path + ("rank_id",), "rank_id",
                           f'"{rank}" out of range: an instance of {size} devices has rank ids 0..{size - 1}')
            else:
                self.ranks.see((path[:-2], rank), path + ("rank_id",), f'rank_id "{rank}"')

    def local_file(self, document: dict) -> None:
        """A local file: group "0", one server entry (an instance, or the scheduler's `_host` file)."""
        self.header(document)
        self.r.expect(document, "group_id", (), "0", "group_id")
        servers = self.r.items(document, "server_list", ())
        self.r.server_count(document, (), len(servers))
        if len(servers) != 1:
            self.r.add(("server_list",), "server_list",
                       f"{len(servers)} entries, expected 1 (a local file describes one instance)")
        for s, server in enumerate(servers):
            if isinstance(server, dict):
                path = ("server_list", s)
                self.instance(server, path, "local") if "device" in server else self.scheduler(server, path)
