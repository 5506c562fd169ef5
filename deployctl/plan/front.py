"""The front of a deployment and how it changes its list while serving (pure): which backends it routes to, and
the steps, run on the front's host, that take one out, put it back and wait until it lists them. What each kind
of front says and answers (the AscendCloud scheduler, vllm-ascend's proxy, vLLM's router) lives in
deployctl/fronts/, one module each; this module asks the front's kind for commands and data.

A front that can change is started with the spec's servers (its restart comes back serving them), but the list is
no part of its identity (`Container.identity_command`): a spec that adds, removes or moves a server keeps the
front and `membership_stages` puts the difference to it while it serves. Neither needs its list at start to
serve: vllm-router starts with none (fronts/router.py), while vllm-ascend's proxy needs one of each (`nargs="+"`
with a `localhost` default, v0.23.0:examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py:646-649),
so both keep the list in their argv and out of their digest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.core import Command
from deployctl.facts.probe import Probe
from deployctl.fronts import FrontKind, front_for_role, front_kind
from deployctl.fronts.base import Backend, backends
from deployctl.fronts.proxy import PROXY
from deployctl.fronts.router import ROUTER, router_command, router_container
from deployctl.fronts.scheduler import SCHEDULER
from deployctl.plan.actions import AwaitListed, Drain
from deployctl.plan.model import Stage, Step
from deployctl.spec.model import Instance, Spec

__all__ = ["PROXY", "ROUTER", "SCHEDULER", "Backend", "Front", "backends", "front_of", "router_command",
           "router_container"]


@dataclass(frozen=True)
class Front:
    """The deployment's front: its kind, its instance, and whether it can drop and re-add backends while serving
    (`why_fixed` says why not)."""

    kind: str  # proxy | vllm-router | scheduler
    instance: Instance
    changes_list: bool
    why_fixed: str = ""

    @property
    def host(self) -> str:
        return self.instance.host

    @property
    def port(self) -> int:
        return self.instance.port or 0

    @property
    def driver(self) -> FrontKind:
        """What its kind says and answers (deployctl/fronts/)."""
        return _kind(self.kind)


def _kind(name: str) -> FrontKind:
    found = front_kind(name)
    if found is None:
        raise ValueError(f"no front of kind {name!r}")
    return found


def front_of(spec: Spec) -> Optional[Front]:
    """The front of a spec, or None (a mixed deployment without one: clients address its instances)."""
    instance = spec.front
    if instance is None:
        return None
    kind = front_for_role(instance.role)
    if kind is None:
        return None
    why_fixed = kind.why_fixed(spec)
    return Front(kind.name, instance, not why_fixed, why_fixed)


def remove_commands(front: Front, gone: tuple[Backend, ...]) -> tuple[Command, ...]:
    """Take backends out of the front: it sends them nothing new (in-flight requests go on)."""
    return _change(front, gone, "remove")


def add_commands(front: Front, back: tuple[Backend, ...]) -> tuple[Command, ...]:
    """Put backends (back) into the front."""
    return _change(front, back, "add")


def _change(front: Front, changed: tuple[Backend, ...], verb: str) -> tuple[Command, ...]:
    if not front.changes_list:
        raise ValueError(f"the {front.kind} front cannot change its list: {front.why_fixed}")
    return front.driver.change_commands(front.port, changed, verb)


def list_command(front: Front) -> Command:
    """What the front routes to now (parse_list reads the answer)."""
    return front.driver.list_command(front.port)


def parse_list(kind: str, text: str) -> frozenset[str]:
    """The backends the answer of a front of `kind` names, as `address:port` (ValueError: not its answer)."""
    return frozenset(parse_roles(kind, text))


def parse_roles(kind: str, text: str) -> dict[str, str]:
    """The answer of a front of `kind`: each backend it lists (`address:port`) with its role (the router's are
    mixed; the proxy lists prefill and decode apart). ValueError/KeyError/TypeError: not its answer."""
    return _kind(kind).parse_roles(text)


FRONT_LIST_KEY = "front_list"


def front_list_probe(front: Front) -> Probe:
    """What the running front routes to, as a fact of its host (HostFacts.front_list): the servers `up` must
    still put into it or take out of it. A front that does not answer leaves the fact unknown."""
    from deployctl.errors import FactParseError

    def parse(text: str) -> dict[str, str]:
        try:
            return parse_roles(front.kind, text)
        except (ValueError, KeyError, TypeError):
            raise FactParseError(front.kind, 1, text[:200], f"the {front.kind}'s list as JSON") from None

    return Probe(list_command(front).argv, parse, FRONT_LIST_KEY, tool_name="curl")


def membership_stages(spec: Spec, stages: tuple[Stage, ...], listed: Optional[Mapping[str, str]],
                      address_of: Mapping[str, str], drain_timeout: float) -> tuple[Stage, ...]:
    """A kept front's list brought to the spec's while it serves: the servers it lists that the spec no longer
    has are taken out and drained before the stop stage stops them; the spec's servers it lacks are put in (and
    awaited) once the front's stage ran, after they passed their health check. `listed`: the front's list as
    gathered (None: unknown, or the front is not running; a started front serves the spec's list from its argv)."""
    front = front_of(spec)
    if front is None or not front.changes_list or listed is None:
        return stages
    step = next((s for stage in stages for s in stage.steps if s.container == front.instance.name), None)
    if step is None or step.action != "keep":
        return stages
    gone, new = list_difference(listed, backends(spec, address_of))
    out = list(stages)
    if gone:
        names = ", ".join(b.key for b in gone)
        drain = drain_step(front, gone, f"take {names} (no longer in the spec) out of the {front.kind}, wait for "
                           "their requests", drain_timeout)
        at = next((i for i, s in enumerate(out) if s.name == "stop"), 0)
        out.insert(at, Stage("drain", (drain,)))
    if new:
        names = ", ".join(b.name for b in new)
        route = route_step(front, new, f"put {names} into the {front.kind}", drain_timeout, undo=True)
        at = max(i for i, s in enumerate(out) if any(x.container == front.instance.name for x in s.steps)) + 1
        out.insert(at, Stage("route", (route,)))
    return tuple(out)


def drain_step(front: Front, chosen: tuple[Backend, ...], reason: str, timeout: float, wave: int = 0,
               put_back: bool = True) -> Step:
    """On the front's host: take `chosen` out of the front, then wait until they hold no request (at most
    `timeout`). `put_back`: a rollback adds them again once their old servers serve (`late_undo`)."""
    return Step(front.host, "drain", "drain", reason, commands=remove_commands(front, chosen),
                actions=(Drain(tuple((b.name, f"{b.url}/metrics") for b in chosen), timeout),),
                late_undo=add_commands(front, chosen) if put_back else (), wave=wave)


def route_step(front: Front, chosen: tuple[Backend, ...], reason: str, timeout: float, wave: int = 0,
               undo: bool = False) -> Step:
    """On the front's host: put `chosen` into the front and wait until it lists them. `undo`: a rollback takes
    them out again (a surge server that is going away)."""
    return Step(front.host, "route", "add", reason, commands=add_commands(front, chosen),
                undo=remove_commands(front, chosen) if undo else (),
                actions=(await_listed(front, chosen, timeout),), wave=wave)


def await_listed(front: Front, back: tuple[Backend, ...], timeout: float) -> AwaitListed:
    """Wait until the front lists what was put back (a proxy may take it only at its next tick)."""
    return AwaitListed(front.kind, list_command(front), tuple(b.key for b in back), timeout)


def list_difference(listed: Mapping[str, str], wanted: tuple[Backend, ...]) -> tuple[tuple[Backend, ...],
                                                                                    tuple[Backend, ...]]:
    """(what the front lists that `wanted` lacks, what `wanted` has that it does not list); `listed`: its list as
    parse_roles reads it."""
    keys = {b.key for b in wanted}
    gone = tuple(_listed_backend(key, role) for key, role in sorted(listed.items()) if key not in keys)
    return gone, tuple(b for b in wanted if b.key not in listed)


def _listed_backend(key: str, role: str) -> Backend:
    """A backend as a front's list names it (`address:port`, its role): enough to take it out."""
    address, _, port = key.rpartition(":")
    return Backend(role, key, address, int(port) if port.isdigit() else 0)


def reach(spec: Spec, networks: Optional[Mapping] = None) -> dict[str, str]:
    """How one host reaches another's servers: vllm-ascend's derived address (what its proxy lists), else the
    spec's address (`local`: loopback)."""
    if networks is not None:
        return {name: network.address for name, network in networks.items()}
    return {h.name: "127.0.0.1" if h.is_local else h.address for h in spec.hosts}
