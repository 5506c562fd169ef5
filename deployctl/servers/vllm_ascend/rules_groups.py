"""Rules of a `server: vllm-ascend` spec (contract: "Upstream vllm-ascend"), each located at the key it is about.

The group rules themselves live in groups.py on plain DpGroups; this module finds the groups in the document,
builds the ones whose values passed the schema, and turns each violation into a Problem at its group's key.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterator, Optional

from deployctl.errors import Problem
from deployctl.servers.vllm_ascend.groups import (
    DpGroup, device_problems, dp_group, group_shape_problems, roles_agree_problems,
)
from deployctl.spec.port_uses import DEFAULT_PROXY_PORT

if TYPE_CHECKING:
    from deployctl.spec.rules import Context, Unit

GROUP_KEYS = {"mixed": ("groups",), "disaggregated": ("prefill", "decode")}


def group_of(c: Context, unit: Unit, index: int) -> Optional[DpGroup]:
    """The DpGroup a unit describes, or None when a value it needs failed the schema or names no host."""
    hosts = c.value(unit.path + ("hosts",), list)
    dp, tp, port = (c.value(unit.path + (key,), int) for key in ("dp", "tp", "port"))
    if hosts is None or dp is None or tp is None or port is None or not hosts:
        return None
    if c.hosts is None or any(not isinstance(h, str) or h not in c.hosts for h in hosts) or len(set(hosts)) < len(hosts):
        return None
    devices = c.value(unit.path + ("devices",), list) if "devices" in unit.data else None
    if "devices" in unit.data and (devices is None or len(set(devices)) < len(devices)
                                   or any(d >= c.cards for d in devices)):
        return None
    for key in ("kv_port", "rpc_port"):
        if key in unit.data and c.value(unit.path + (key,), int) is None:
            return None
    return dp_group(unit.role, index, hosts, dp, tp, port, c.cards,
                              expert_parallel=c.value(unit.path + ("expert_parallel",), bool) is True,
                              devices=tuple(devices) if devices is not None else None,
                              kv_port=c.value(unit.path + ("kv_port",), int),
                              rpc_port=c.value(unit.path + ("rpc_port",), int), number=unit.path[2])


def check_upstream(c: Context) -> Iterator[Problem]:
    """Every rule of the contract's section, all at once (servers/vllm_ascend/ runs them)."""
    topology = c.value(("topology",), dict)
    if topology is None or c.mode not in GROUP_KEYS:
        return
    yield from _mode_keys(c, topology)
    yield from _host_references(c)
    built = built_groups(c)
    yield from _devices_listed(c)
    units = {id(group): unit for unit, group in built}
    groups = [g for _, g in built]

    def located(violations) -> Iterator[Problem]:
        for v in violations:
            if v.group is None:
                key = front_key(c) or "proxy"
                yield Problem(("topology", key) + ((v.key,) if v.key in topology[key] else ()), v.message)
            else:
                unit = units[id(v.group)]  # a defaulted key (kv_port, rpc_port) is reported at its group
                yield Problem(unit.path + ((v.key,) if v.key in unit.data else ()), v.message)

    for group in groups:
        yield from located(group_shape_problems(group, c.cards))
    yield from located(roles_agree_problems(groups))
    yield from located(device_problems(groups, c.cards, c.machine))
    # their ports are in the deployment's one port set, checked with every other port (spec/port_set.py)


def built_groups(c: Context) -> list[tuple[Unit, DpGroup]]:
    """(unit, group) of every group whose values passed the schema, in index order."""
    built = [(unit, group_of(c, unit, index)) for index, unit in enumerate(c.groups)]
    return [(unit, group) for unit, group in built if group is not None]


def launchable_groups(c: Context) -> list[tuple[Unit, DpGroup]]:
    """The built groups whose shape can be launched: the others' ranks and ports mean nothing."""
    return [(unit, group) for unit, group in built_groups(c)
            if not any(True for _ in group_shape_problems(group, c.cards))]


def _mode_keys(c: Context, topology: dict) -> Iterator[Problem]:
    """mixed: groups only; disaggregated: connector, proxy and at least one prefill and one decode group."""
    wanted = GROUP_KEYS[c.mode] + (("connector", "proxy") if c.mode == "disaggregated" else ())
    other = "disaggregated" if c.mode == "mixed" else "mixed"
    for key in ("groups", "prefill", "decode", "connector", "proxy"):
        if key in topology and key not in wanted:
            yield Problem(("topology", key), f"'{key}' belongs to mode {other}; mode {c.mode} uses "
                                             f"{', '.join(wanted)}")
    for key in wanted:
        if key == "proxy" and "front" in topology:
            continue  # topology.front (kind proxy) is the same front; rules_front.py says what else it must be
        if key == "groups" and "instances" in topology:
            continue  # the AscendCloud key is reported with the upstream one to use instead
        if key not in topology:
            what = {"connector": "a KV connector ('connector: mooncake')", "proxy": "a proxy ('proxy: {host, port}')",
                    "groups": "at least one DP group ('groups')"}
            yield Problem(("topology",), f"mode {c.mode} needs {what.get(key, f'at least one {key} group ({key!r})')}")
        elif topology[key] == [] and c.ok(("topology", key)):
            yield Problem(("topology", key), f"mode {c.mode} needs at least one group here")


def _host_references(c: Context) -> Iterator[Problem]:
    if c.hosts is None:
        return
    named = [(unit.path + ("hosts", i), h) for unit in c.groups
             for i, h in enumerate(c.value(unit.path + ("hosts",), list) or ())]
    proxy_host = c.value(("topology", "proxy", "host"), str)  # topology.front's: rules_front.py, as for any server
    if proxy_host is not None:
        named.append((("topology", "proxy", "host"), proxy_host))
    for path, host in named:
        if isinstance(host, str) and c.ok(path) and host not in c.hosts:
            close = difflib.get_close_matches(host, c.hosts, n=1, cutoff=0.6)
            yield Problem(path, f"unknown host '{host}'" + (f" — did you mean '{close[0]}'?" if close else ""),
                          hint=f"hosts in this spec: {', '.join(c.hosts)}")
    for unit in c.groups:
        hosts = c.value(unit.path + ("hosts",), list) or []
        for i, host in enumerate(hosts):
            if host in hosts[:i]:
                yield Problem(unit.path + ("hosts", i), f"host '{host}' is listed twice in this group",
                              hint="a group lists each host once; dp / len(hosts) ranks run on each")


def _devices_listed(c: Context) -> Iterator[Problem]:
    """A group's usable devices: ids 0..cards-1, each once."""
    for unit in c.groups:
        devices = c.value(unit.path + ("devices",), list) or []
        for i, device in enumerate(devices):
            if not c.ok(unit.path + ("devices", i)):
                continue
            if device >= c.cards:
                yield Problem(unit.path + ("devices", i), f"{device} is not a device id (cards: 0-{c.cards - 1})",
                              hint="requirements.cards sets how many devices each host has")
            elif device in devices[:i]:
                yield Problem(unit.path + ("devices", i), f"NPU {device} is listed twice")


def front_key(c: Context) -> Optional[str]:
    """Where the front is written: `proxy` (vllm-ascend P/D), else `front` (the proxy or vllm-router), else None."""
    topology = c.value(("topology",), dict) or {}
    return next((key for key in ("proxy", "front") if isinstance(topology.get(key), dict)), None)


def proxy_of(c: Context) -> Optional[tuple[str, Optional[int], int]]:
    """The front's host, its written port (None: not written) and its default: the proxy of P/D, a vllm-router of
    mixed; None when it has no host of the spec or its port failed the schema."""
    key = front_key(c)
    host = c.value(("topology", key, "host"), str) if key else None
    if (key == "proxy" and c.mode != "disaggregated") or host is None or c.hosts is None or host not in c.hosts:
        return None
    port = c.value(("topology", key, "port"), int)
    if "port" in (c.value(("topology", key), dict) or {}) and port is None:
        return None
    return host, port, DEFAULT_PROXY_PORT


def card_counts(c: Context) -> Iterator[tuple[tuple, int, str]]:
    """(path, cards, what) of each group for the model table: tp x (dp with expert parallel, else 1)."""
    for unit in c.groups:
        dp, tp = c.value(unit.path + ("dp",), int), c.value(unit.path + ("tp",), int)
        if dp is None or tp is None:
            continue
        expert = c.value(unit.path + ("expert_parallel",), bool) is True
        count = tp * (dp if expert else 1)
        yield unit.path + ("tp",), count, f"this group has {count} (tp {tp}" + (
            f" x dp {dp}, expert parallel)" if expert else ")")
