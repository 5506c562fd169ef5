"""The rules of `topology.front` and `rollout` (issue 31): which front each topology may have, and when a drain
rollout has something to drain through. Pure, on the plain document like the other rules."""

from __future__ import annotations

import difflib
from typing import Iterator, Optional

from deployctl.errors import Problem
from deployctl.fronts import front_for_role, front_kind
from deployctl.servers.features import refuses
from deployctl.spec.rules import Context

FRONT = ("topology", "front")


def check_front(c: Context) -> Iterator[Problem]:
    """A front each topology can change while serving: vllm-router for mixed, vllm-ascend's proxy for its P/D;
    the AscendCloud scheduler stays the P/D front of its flow."""
    front = c.value(FRONT, dict)
    if front is None:
        return
    kind = c.value(FRONT + ("kind",), str)
    yield from _host(c)
    if refuses(c.flavour, FRONT, front):
        return  # refused with the flavour's reason (rules.py check_features)
    own, drains = own_front(c)
    if own is not None and not drains:
        yield Problem(FRONT, "the AscendCloud P/D flow keeps its scheduler (topology.scheduler) as its front: the "
                             "workers are given each other's NODE_PORTS when they start, so no router can add or "
                             "remove one while serving",
                      hint="remove topology.front; `deployctl plan` says how long this flow's update leaves no "
                           "server answering")
        return
    if own is not None and c.value(("topology", own), dict) is not None:
        yield Problem(FRONT, "topology.proxy and topology.front are the same front (the proxy, kind proxy): "
                             "write one of them")
    driver = front_kind(kind)
    if driver is not None:  # an unknown kind: refused by the schema
        yield from driver.check(c, front, FRONT)
    # its port is in the deployment's one port set (rules.check_ports)


def _host(c: Context) -> Iterator[Problem]:
    host = c.value(FRONT + ("host",), str)
    if host is None or c.hosts is None or host in c.hosts:
        return
    close = difflib.get_close_matches(host, c.hosts, n=1, cutoff=0.6)
    yield Problem(FRONT + ("host",), f"unknown host '{host}'" + (f" — did you mean '{close[0]}'?" if close else ""),
                  hint=f"hosts in this spec: {', '.join(c.hosts)}")


def has_front(c: Context) -> bool:
    """The spec names a front that can change its list: topology.front, or vllm-ascend's P/D proxy."""
    if c.value(FRONT, dict) is not None:
        return True
    own, drains = own_front(c)
    return own is not None and drains and c.value(("topology", own), dict) is not None


def own_front(c: Context) -> tuple[Optional[str], bool]:
    """The front the topology holds itself in its mode, by role and topology key (servers/base.py topology_front:
    the AscendCloud scheduler, vllm-ascend's proxy), and whether a drain can take servers out through it."""
    role = c.flavour.topology_front(c.mode)
    kind = front_for_role(role) if role is not None else None
    return role, kind is not None and kind.drains


def check_rollout(c: Context) -> Iterator[Problem]:
    """`strategy: drain` needs a front to take instances out of; surge goes with drain."""
    rollout = c.value(("rollout",), dict)
    if rollout is None:
        return
    strategy = c.value(("rollout", "strategy"), str)
    if strategy == "drain" and not has_front(c):
        own, drains = own_front(c)
        scheduler = own is not None and not drains
        yield Problem(("rollout", "strategy"),
                      "strategy drain takes each instance out of the front first, and "
                      + ("the AscendCloud scheduler cannot drop one while serving (its NODE_PORTS are fixed)"
                         if scheduler else "this spec has no front: clients address its instances directly"),
                      hint="strategy: recreate" if scheduler else
                      "add topology.front: {kind: vllm-router, host: ..., port: ..., image: ...}")
    if strategy == "recreate" and c.value(("rollout", "max_surge"), int):
        yield Problem(("rollout", "max_surge"), "max_surge is used by strategy drain only; recreate stops every "
                                                "changed container first", severity="warning")
