"""The rules of `topology.front` and `rollout` (issue 31): which front each topology may have, and when a drain
rollout has something to drain through. Pure, on the plain document like the other rules."""

from __future__ import annotations

import difflib
from typing import Iterator, Optional

from deployctl.errors import Problem
from deployctl.servers.features import Feature
from deployctl.spec.rules import Context, _ports
from deployctl.spec.rules_upstream import DEFAULT_ROUTER_METRICS_PORT

FRONT = ("topology", "front")
ROUTER_IMAGE_HINT = ("vLLM's router has no official image: build one from its PyPI wheel "
                     "(`docker build -t vllm-router:0.1.17 images/vllm-router`) and write front.image")


def check_front(c: Context) -> Iterator[Problem]:
    """A front each topology can change while serving: vllm-router for mixed, vllm-ascend's proxy for its P/D;
    the AscendCloud scheduler stays the P/D front of its flow."""
    front = c.value(FRONT, dict)
    if front is None:
        return
    kind = c.value(FRONT + ("kind",), str)
    yield from _host(c)
    if not c.flavour.supports(Feature.OPENAI_API):
        return  # refused with the flavour's reason (spec/rules_features.py)
    if not c.flavour.dp_groups and c.mode == "disaggregated":
        yield Problem(FRONT, "the AscendCloud P/D flow keeps its scheduler (topology.scheduler) as its front: the "
                             "workers are given each other's NODE_PORTS when they start, so no router can add or "
                             "remove one while serving",
                      hint="remove topology.front; `deployctl plan` says how long this flow's update leaves no "
                           "server answering")
        return
    if c.flavour.dp_groups and c.mode == "disaggregated" and c.value(("topology", "proxy"), dict) is not None:
        yield Problem(FRONT, "topology.proxy and topology.front are the same front (the proxy, kind proxy): "
                             "write one of them")
    if kind == "proxy" and c.mode == "mixed":
        yield Problem(FRONT + ("kind",), "kind proxy is vllm-ascend's P/D proxy (it lists prefill and decode "
                                         "servers); a mixed deployment's front is kind vllm-router")
    if kind == "vllm-router" and c.mode == "disaggregated":
        yield Problem(FRONT + ("kind",), "deployctl runs vllm-router in front of mixed servers only; vllm-ascend's "
                                         "P/D (the Mooncake connector) is fronted by its own proxy",
                      hint="kind: proxy")
    if kind == "vllm-router" and "image" not in front:
        yield Problem(FRONT, "kind vllm-router needs front.image", hint=ROUTER_IMAGE_HINT)
    if kind == "proxy":
        for key in ("image", "policy", "metrics_port"):
            if key in front:
                yield Problem(FRONT + (key,), f"front.{key} is for kind vllm-router; the proxy runs in the server "
                                              f"image with its own balancing", severity="warning")
    if not c.flavour.dp_groups:
        yield from _ports_taken(c, front)


def _host(c: Context) -> Iterator[Problem]:
    host = c.value(FRONT + ("host",), str)
    if c.flavour.dp_groups or host is None or c.hosts is None or host in c.hosts:
        return  # vllm-ascend's host references are checked with its groups' (rules_upstream.py)
    close = difflib.get_close_matches(host, c.hosts, n=1, cutoff=0.6)
    yield Problem(FRONT + ("host",), f"unknown host '{host}'" + (f" — did you mean '{close[0]}'?" if close else ""),
                  hint=f"hosts in this spec: {', '.join(c.hosts)}")


def router_metrics_port(c: Context) -> Optional[int]:
    """A vllm-router front's --prometheus-port (its default where the key is left out); None for other fronts."""
    front = c.value(FRONT, dict) or {}
    if c.value(FRONT + ("kind",), str) != "vllm-router":
        return None
    return c.value(FRONT + ("metrics_port",), int) if "metrics_port" in front else DEFAULT_ROUTER_METRICS_PORT


def _ports_taken(c: Context, front: dict) -> Iterator[Problem]:
    """The front's ports (its public one, a vllm-router's metrics one) against each other and every instance's
    ports on the same machine (vllm-ascend: with its groups', rules_upstream.py)."""
    host = c.value(FRONT + ("host",), str)
    port = c.value(FRONT + ("port",), int) if "port" in front else 8000
    if host is None or port is None:
        return
    mine = [(port, "port", "the front's")]
    metrics = router_metrics_port(c)
    if metrics is not None:
        mine.append((metrics, "metrics_port", "the vllm-router's metrics port"))
        if metrics == port:
            yield Problem(FRONT + (("metrics_port",) if "metrics_port" in front else ("port",)),
                          f"port {port} on host {host} is both the front's and the vllm-router's metrics port")
    for unit in c.units():
        other = c.host_of(unit)
        if other is None or c.machine(other) != c.machine(host):
            continue
        for taken, _path, shown, _default in _ports(c, unit):
            for wanted, key, what in mine:
                if taken == wanted:
                    yield Problem(FRONT + ((key,) if key in front else ()),
                                  f"port {wanted} ({what}) on host {host} is already used by {shown}"
                                  f"{c.same_machine(host, other)}")


def has_front(c: Context) -> bool:
    """The spec names a front that can change its list: topology.front, or vllm-ascend's P/D proxy."""
    if c.value(FRONT, dict) is not None:
        return True
    return c.flavour.dp_groups and c.mode == "disaggregated" and c.value(("topology", "proxy"), dict) is not None


def check_rollout(c: Context) -> Iterator[Problem]:
    """`strategy: drain` needs a front to take instances out of; surge goes with drain."""
    rollout = c.value(("rollout",), dict)
    if rollout is None:
        return
    strategy = c.value(("rollout", "strategy"), str)
    if strategy == "drain" and not has_front(c):
        scheduler = not c.flavour.dp_groups and c.mode == "disaggregated"
        yield Problem(("rollout", "strategy"),
                      "strategy drain takes each instance out of the front first, and "
                      + ("the AscendCloud scheduler cannot drop one while serving (its NODE_PORTS are fixed)"
                         if scheduler else "this spec has no front: clients address its instances directly"),
                      hint="strategy: recreate" if scheduler else
                      "add topology.front: {kind: vllm-router, host: ..., port: ..., image: ...}")
    if strategy == "recreate" and c.value(("rollout", "max_surge"), int):
        yield Problem(("rollout", "max_surge"), "max_surge is used by strategy drain only; recreate stops every "
                                                "changed container first", severity="warning")
