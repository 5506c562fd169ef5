"""Cross-field rules of a spec (contract: "Rules a valid spec obeys"), on the plain document.

They run on every part that passed the schema: a value whose path (or an ancestor's) failed the schema is
skipped, so one run reports schema errors and rule errors together without repeating itself.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterator

from deployctl.errors import Problem
from deployctl.spec.locate import Path

DEFAULT_CARDS = 8
DEFAULT_SCHEDULER_PORT = 9000
MAX_DEVICES = 8
WORKER_LISTS = ("instances", "prefill", "decode")
# Addresses that all mean the machine deployctl runs on.
LOCAL_ADDRESSES = ("local", "localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Unit:
    """An instance (or the scheduler) as the rules see it: its role, its place and its raw mapping."""

    role: str  # mixed | prefill | decode | scheduler
    path: Path
    data: dict
    node: int | None = None  # a server over several hosts (`hosts`): its node rank, one unit per host

    @property
    def where(self) -> str:
        return Problem(self.path).dotted_path


class Context:
    """The document plus what every rule needs: the failed paths and the values read defensively."""

    def __init__(self, data: dict, failed: set, references: dict | None = None, locate=None) -> None:
        self.data, self.failed, self.references = data, failed, references or {}
        self.locate = locate  # path -> (line, column) in the file, where a message names another key's line
        self.model_shape = None  # the weights' config.json as read (facts/model_config.py), where it could be
        self.platform = self.value(("platform",), str) or "ascend"
        self.server = self.value(("server",), str) or "vllm"
        self.cards = self.value(("requirements", "cards"), int) or DEFAULT_CARDS
        hosts = self.value(("hosts",), dict)
        self.hosts = None if hosts is None else list(hosts)
        self.mode = self.value(("topology", "mode"), str)
        from deployctl.servers import flavour_named

        self.flavour = flavour_named(self.platform, self.server)  # whose rules and field table apply
        # A vllm-ascend topology has DP groups, not instances: the instance rules do not apply to it.
        self.workers, self.groups, self.scheduler = self.flavour.document_units(self)

    def line_of(self, path: Path) -> int:
        """The line of `path` in the spec file (0: unknown)."""
        return self.locate(path)[0] if self.locate is not None else 0

    def ok(self, path: Path) -> bool:
        """True when neither this path nor an ancestor failed the schema."""
        return not any(path[: len(bad)] == bad for bad in self.failed)

    def value(self, path: Path, kind: type | tuple) -> Any:
        """The value at `path` if it passed the schema and has this type; else None."""
        node: Any = self.data
        for part in path:
            if isinstance(node, dict) and isinstance(part, str) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                return None
        if not self.ok(path) or not isinstance(node, kind) or (isinstance(node, bool) and kind in (int, (int, float))):
            return None
        return node

    def worker_units(self) -> Iterator[Unit]:
        # In the order the spec lists them, so "already used by" names the one written first.
        for key in self.value(("topology",), dict) or {}:
            items = self.value(("topology", key), list) if key in WORKER_LISTS else None
            for index, item in enumerate(items or []):
                if isinstance(item, dict) and self.ok(("topology", key, index)):
                    role, path = "mixed" if key == "instances" else key, ("topology", key, index)
                    nodes = self.value(path + ("hosts",), list) if "host" not in item else None
                    if nodes:  # one unit per host it spans: each binds its devices there
                        yield from (Unit(role, path, item, node) for node in range(len(nodes)))
                    else:
                        yield Unit(role, path, item)

    def scheduler_unit(self) -> Unit | None:
        """The AscendCloud P/D scheduler, where the document has one."""
        scheduler = self.value(("topology", "scheduler"), dict)
        return Unit("scheduler", ("topology", "scheduler"), scheduler) if scheduler is not None else None

    def group_units(self) -> Iterator[Unit]:
        """vllm-ascend's DP groups, prefill before decode: their order is their index across the deployment."""
        for key in ("groups", "prefill", "decode"):
            for index, item in enumerate(self.value(("topology", key), list) or []):
                if isinstance(item, dict) and self.ok(("topology", key, index)):
                    yield Unit("mixed" if key == "groups" else key, ("topology", key, index), item)

    def units(self) -> list[Unit]:
        """Workers and the scheduler, in the order the spec lists them."""
        if self.scheduler is None:
            return list(self.workers)
        order = list(self.value(("topology",), dict) or {})
        before = [u for u in self.workers if order.index(u.path[1]) < order.index("scheduler")]
        return before + [self.scheduler] + [u for u in self.workers if u not in before]

    def devices(self, unit: Unit) -> list[int] | None:
        return self.value(unit.path + ("devices",), list)

    def host_of(self, unit: Unit) -> str | None:
        return self.value(self.host_path(unit), str)

    def nodes(self, unit: Unit) -> int:
        """How many hosts the unit's server spans (1: its one host)."""
        return len(self.value(unit.path + ("hosts",), list) or ()) if unit.node is not None else 1

    def host_path(self, unit: Unit) -> Path:
        """Where its host is written: `host`, or its node's entry of `hosts`."""
        return unit.path + (("host",) if unit.node is None else ("hosts", unit.node))

    def machine(self, host: str) -> str:
        """The machine a host name stands for: its address, compared case- and space-insensitively."""
        address = self.value(("hosts", host, "address"), str)
        if address is None:
            return f"host {host}"  # no address to compare: only the name itself is the same machine
        address = address.strip().lower()
        return "local" if address in LOCAL_ADDRESSES else address

    def same_machine(self, host: str, other: str) -> str:
        """`: node1 and node2 both have address 10.0.0.1` when two names are one machine, else ""."""
        if host == other:
            return ""
        machine = self.machine(host)
        where = "are both the machine deployctl runs on" if machine == "local" else f"both have address {machine}"
        return f": {other} and {host} {where}"


def check_rules(data: Any, failed: set, references: dict | None = None, locate=None,
                model_shape=None) -> list[Problem]:
    """Every rule violation (errors and warnings), unlocated: load.py adds file/line/column.

    `references`: path -> the `${VAR}` text of each string that held one (its value may not be printed);
    `model_shape`: what the weights' config.json says where deployctl could read it (facts/model_config.py).
    """
    if not isinstance(data, dict):
        return []
    context = Context(data, failed, references, locate)
    context.model_shape = model_shape
    problems: list[Problem] = []
    for rule in RULES:
        problems.extend(rule(context))
    return problems


def check_host_references(c: Context) -> Iterator[Problem]:
    if c.hosts is None:
        return
    for unit in c.units():
        host = c.host_of(unit)
        if host is not None and host not in c.hosts:
            close = difflib.get_close_matches(host, c.hosts, n=1, cutoff=0.6)
            message = f"unknown host '{host}'" + (f" — did you mean '{close[0]}'?" if close else "")
            yield Problem(c.host_path(unit), message, hint=f"hosts in this spec: {', '.join(c.hosts)}")


def check_devices(c: Context) -> Iterator[Problem]:
    """Ids 0..cards-1, each once per machine across all instances, a power-of-two count up to 8.

    One NPU, one owner: two host names with one address are one machine.
    """
    kind = "GPU" if c.platform == "gpu" else "NPU"
    used: dict[tuple[str, int], tuple[Unit, str]] = {}
    for unit in c.workers:
        devices, host = c.devices(unit), c.host_of(unit)
        if devices is None:
            continue
        for index, device in enumerate(devices):
            path = unit.path + ("devices", index)
            if not isinstance(device, int) or isinstance(device, bool) or not c.ok(path):
                continue
            if device >= c.cards:
                if not unit.node:  # the same ids on every node of a server over several hosts: said once
                    yield Problem(path, f"{device} is not a device id (cards: 0-{c.cards - 1})",
                                  hint="requirements.cards sets how many devices each host has")
            elif host is not None and (c.machine(host), device) in used:
                other, other_host = used[(c.machine(host), device)]
                where = "this instance" if other is unit else other.where
                yield Problem(path, f"{kind} {device} on host {host} is already used by {where}"
                              f"{c.same_machine(host, other_host)}",
                              hint=f"give each instance its own devices; {host} has 0-{c.cards - 1}")
            elif host is not None:
                used[(c.machine(host), device)] = (unit, host)
        count = len(devices)
        if count and not unit.node and not _is_tp_size(count, c.flavour.max_devices):
            sizes = [str(1 << k) for k in range(c.flavour.max_devices.bit_length())]
            yield Problem(unit.path + ("devices",),
                          f"{count} devices: an instance needs {', '.join(sizes[:-1])} or {sizes[-1]} (its TP size "
                          "is its device count)")


def _is_tp_size(count: int, most: int = MAX_DEVICES) -> bool:
    """1, 2, 4 or 8 (or up to the flavour's `most`): a power of two no larger than that."""
    return 0 < count <= most and not count & (count - 1)


def check_ports(c: Context) -> Iterator[Problem]:
    """Every port the deployment binds on a machine (address) has one user, across both flavours' servers, the
    front and the exporters the spec says its hosts run (spec/port_set.py); kv ports stay below 65536."""
    from deployctl.spec.port_set import collision_hint, collision_message, collisions, document_ports

    for collision in collisions(document_ports(c), c.machine):
        other = collision.other
        line = c.line_of(other.path) if other is not None else 0
        same = c.same_machine(collision.mine.host, other.host) if other is not None else ""
        yield Problem(collision.mine.path, collision_message(collision, line, same), hint=collision_hint(collision))


def check_topology(c: Context) -> Iterator[Problem]:
    """mixed: instances only; disaggregated: one scheduler, >=1 prefill and decode, one TP size."""
    from deployctl.servers.registry import options_of, readers_of

    topology = c.value(("topology",), dict)
    shapes = c.flavour.topology_keys  # none for DP groups: they have their own rules (rules_upstream.py)
    if topology is None or c.mode not in shapes:
        return
    wanted = shapes[c.mode]
    for key, what in options_of("topology_options").items():
        if key in topology and key not in c.flavour.topology_options:
            yield Problem(("topology", key), f"topology.{key} is ignored unless server is {readers_of(key)} ({what})",
                          severity="warning")
    for key in dict.fromkeys(k for keys in shapes.values() for k in keys):
        if key in topology and key not in wanted:
            other = "disaggregated" if c.mode == "mixed" else "mixed"
            yield Problem(("topology", key), f"'{key}' belongs to mode {other}; mode {c.mode} uses "
                                             f"{', '.join(wanted)}")
    for key in wanted:
        if key not in topology:
            what = "a scheduler" if key == "scheduler" else f"at least one {'instance' if key == 'instances' else key + ' instance'}"
            yield Problem(("topology",), f"mode {c.mode} needs {what} ('{key}')")
        elif topology[key] == [] and c.ok(("topology", key)):
            yield Problem(("topology", key), f"mode {c.mode} needs at least one instance here")
    if c.mode == "disaggregated" and "scheduler" in wanted:  # the scheduler runs with the one P/D TP size
        yield from _check_one_tp(c)


def _check_one_tp(c: Context) -> Iterator[Problem]:
    first: Unit | None = None
    for unit in c.workers:
        devices = c.devices(unit)
        if unit.role not in ("prefill", "decode") or not _is_tp_size(len(devices or ())):
            continue  # an invalid count has its own error; comparing it would only repeat it
        if first is None:
            first = unit
        elif len(devices) != len(c.devices(first)):
            yield Problem(unit.path + ("devices",),
                          f"{len(devices)} devices, but {first.where} has {len(c.devices(first))}: every prefill "
                          f"and decode instance must use the same number of devices (one TP size)")


def check_platform(c: Context) -> Iterator[Problem]:
    """Keys that belong to the other platform or server."""
    requirements = c.value(("requirements",), dict) or {}
    if c.platform == "gpu" and "npu_memory_gb" in requirements:
        yield Problem(("requirements", "npu_memory_gb"), "npu_memory_gb is for platform ascend; "
                      "this spec is platform gpu", hint="use gpu_memory_gb")
    if c.platform == "ascend" and "gpu_memory_gb" in requirements:
        yield Problem(("requirements", "gpu_memory_gb"), "gpu_memory_gb is ignored on platform ascend",
                      severity="warning")
    from deployctl.servers.registry import flavour_for, options_of, platforms_of, readers_of

    if flavour_for(c.platform, c.server) is None and c.ok(("platform",)):
        yield Problem(("server",), f"server {c.server} runs on platform {' or '.join(platforms_of(c.server))} only; "
                                   f"this spec is platform {c.platform}", hint=c.flavour.wrong_platform_hint)
    for unit in c.workers:
        if unit.node:
            continue  # its entry's keys are said once, at its first node
        listened = {key for key, _ in c.flavour.ports_of(unit.role, c.nodes(unit))}
        for key, when in options_of("port_keys").items():
            if key in unit.data and key not in listened:
                yield Problem(unit.path + (key,), f"{key} is ignored unless {when}", severity="warning")
        if "hosts" in unit.data and "hosts" not in c.flavour.instance_options:
            yield Problem(unit.path + ("hosts",), f"an instance over several hosts is server {readers_of('hosts')}'s "
                                                  f"{options_of('instance_options')['hosts']}; {c.flavour.title} runs "
                                                  f"each instance on one host",
                          hint="one instance per host (host: ...), or server: vllm-ascend's DP groups")
        elif "hosts" in unit.data and "host" in unit.data:
            yield Problem(unit.path + ("hosts",), "give host (one host) or hosts (a server over several), not both",
                          hint="remove host: the first of hosts serves the API")


def check_flavour(c: Context) -> Iterator[Problem]:
    """The rules of the spec's server flavour (servers/<flavour>.py)."""
    yield from c.flavour.check(c)


def check_features(c: Context) -> Iterator[Problem]:
    """A key that asks for what the flavour cannot do, refused with its reason (servers/features.py)."""
    from deployctl.servers.features import refused

    yield from refused(c.flavour, lambda path: c.value(path, object))


from deployctl.spec.rules_model import (  # noqa: E402 (they use Context, defined above)
    check_batched_tokens, check_env, check_kv_cache, check_model_fields, check_model_table,
)
from deployctl.spec.rules_cache import check_cache  # noqa: E402
from deployctl.spec.rules_front import check_front, check_rollout  # noqa: E402
from deployctl.spec.rules_monitor import check_monitor  # noqa: E402
from deployctl.spec.rules_hooks import check_hooks  # noqa: E402

RULES = (check_host_references, check_devices, check_ports, check_topology, check_batched_tokens,
         check_kv_cache, check_platform, check_model_fields, check_model_table, check_env, check_flavour,
         check_features, check_front, check_rollout, check_cache, check_monitor, check_hooks)
