"""The front of a deployment and how it changes its list while serving (pure): which backends it routes to, and
the commands, run on the front's host, that take one out, put it back and list what it routes to.

Two fronts can change their list at run time, both existing routers (issue 31):
- vllm-ascend's load-balance proxy (P/D): `POST /instances/add|remove` with `{"type": "prefill"|"decode",
  "instances": ["host:port", ...]}` (vllm-ascend HEAD:examples/disaggregated_prefill_v1/
  load_balance_proxy_server_example.py:80-106, `adjust_instances_impl`; added by vllm-ascend #5063, first in
  v0.13.0rc1). A removed instance with requests in flight is tainted: no new request goes to it, and it leaves the
  list once they finish (`remove_instances`). Both calls answer the current lists (`current_prefill_instances`,
  `current_decode_instances`); an add of nothing is how the list is read.
- vLLM's router (`vllm-router` on PyPI, 0.1.17): `POST /add_worker?url=URL`, `POST /remove_worker?url=URL`,
  `GET /list_workers` -> `{"urls": [...]}` (vllm-project/router src/server.rs, `admin_routes`); started with
  `--worker-urls URL ...`, `--policy`, `--host`, `--port` (vllm_router/router_args.py, `add_cli_args`).
The AscendCloud scheduler is a front too, but its workers are fixed at start (NODE_PORTS): it cannot change.

A front that can change is started with the spec's servers (its restart comes back serving them), but the list is
no part of its identity (`Container.identity_command`): a spec that adds, removes or moves a server keeps the
front and `membership_stages` puts the difference to it while it serves. Neither needs its list at start to
serve: vllm-router starts with none (`--worker-urls` is `nargs="*"`, vllm_router/router_args.py; an empty
Regular-mode list passes vllm-project/router src/config/validation.rs `validate_mode`, and 0.1.17 logs
`Router ready | workers: []`), while vllm-ascend's proxy needs one of each (`nargs="+"` with a `localhost`
default, v0.23.0:examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py:646-649), so both
keep the list in their argv and out of their digest."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional
from urllib.parse import quote

from deployctl.core import Command
from deployctl.facts.probe import Probe
from deployctl.plan.actions import AwaitListed, Drain
from deployctl.plan.model import Stage, Step
from deployctl.spec.model import Instance, Spec


PROXY, ROUTER, SCHEDULER = "proxy", "vllm-router", "scheduler"
ROUTER_COMMAND = "vllm-router"  # the wheel's console script (vllm_router.launch_router:main)
ROUTER_HEALTH_PATH = "/liveness"  # answers once the router serves, whatever its workers do (src/server.rs)
# The proxy's add/remove arrived with vllm-ascend #5063 (v0.13.0rc1): release lines before it cannot change.
PROXY_CHANGES_FROM = (0, 13)
CALL_TIMEOUT = "10"  # seconds for one control call to the front


@dataclass(frozen=True)
class Backend:
    """One API server behind the front, as the front names it."""

    role: str  # mixed | prefill | decode
    name: str  # its container
    address: str  # as the front reaches it
    port: int

    @property
    def key(self) -> str:
        """`address:port`: the proxy's name for it."""
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        """`http://address:port`: the router's name for it."""
        return f"http://{self.address}:{self.port}"


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


def front_of(spec: Spec) -> Optional[Front]:
    """The front of a spec, or None (a mixed deployment without one: clients address its instances)."""
    instance = spec.front
    if instance is None:
        return None
    if instance.role == "scheduler":
        return Front(SCHEDULER, instance, False, "the AscendCloud scheduler's workers are fixed when it starts "
                                                 "(NODE_PORTS)")
    if instance.role == "router":
        return Front(ROUTER, instance, True)
    if not _proxy_changes(spec):
        return Front(PROXY, instance, False, "vllm-ascend's proxy adds and removes instances from v0.13.0rc1 "
                                             f"(vllm-ascend #5063); this image runs {_release(spec)}")
    return Front(PROXY, instance, True)


def _proxy_changes(spec: Spec) -> bool:
    """Whether the image's proxy serves /instances/add|remove: its server profile says (proxy_instances_api_from),
    else (a profile table without that key) its release line."""
    choice = spec.profile
    if choice is None:
        return True
    said = getattr(choice, "has_proxy_instances_api", None)
    if said is not None:
        return bool(said)
    line = _profile_line(spec)
    return line is None or line >= PROXY_CHANGES_FROM


def _release(spec: Spec) -> str:
    version = getattr(spec.profile, "version", None)
    line = _profile_line(spec)
    return (f"v{version.major}.{version.minor}.{version.micro}" if version is not None
            else f"the {line[0]}.{line[1]} line" if line else "an older release")


def _profile_line(spec: Spec) -> Optional[tuple[int, int]]:
    if spec.profile is None:
        return None
    major, _, minor = spec.profile.profile.line.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None


def backends(spec: Spec, address_of: Mapping[str, str]) -> tuple[Backend, ...]:
    """Every API server the front routes to, in spec order (headless servers serve no API)."""
    front = spec.front
    return tuple(Backend(i.role, i.name, address_of[i.host], i.port) for i in spec.api_servers
                 if i is not front and i.role in ("mixed", "prefill", "decode"))


def _post(front: Front, path: str, body: Optional[dict] = None) -> Command:
    words = ["curl", "--silent", "--show-error", "--fail-with-body", "--max-time", CALL_TIMEOUT, "--request", "POST"]
    if body is not None:
        words += ["--header", "Content-Type: application/json", "--data-binary",
                  json.dumps(body, separators=(",", ":"))]
    return Command((*words, f"http://127.0.0.1:{front.port}{path}"))


def remove_commands(front: Front, gone: tuple[Backend, ...]) -> tuple[Command, ...]:
    """Take backends out of the front: it sends them nothing new (in-flight requests go on)."""
    return _change(front, gone, "remove")


def add_commands(front: Front, back: tuple[Backend, ...]) -> tuple[Command, ...]:
    """Put backends (back) into the front."""
    return _change(front, back, "add")


def _change(front: Front, changed: tuple[Backend, ...], verb: str) -> tuple[Command, ...]:
    if not front.changes_list:
        raise ValueError(f"the {front.kind} front cannot change its list: {front.why_fixed}")
    if front.kind == ROUTER:
        return tuple(_post(front, f"/{verb}_worker?url={quote(b.url, safe='')}") for b in changed)
    by_role: dict[str, list[str]] = {}
    for backend in changed:
        by_role.setdefault(backend.role, []).append(backend.key)
    return tuple(_post(front, f"/instances/{verb}", {"type": role, "instances": keys})
                 for role, keys in by_role.items())


def list_command(front: Front) -> Command:
    """What the front routes to now (parse_list reads the answer)."""
    if front.kind == ROUTER:
        return Command(("curl", "--silent", "--show-error", "--fail", "--max-time", CALL_TIMEOUT,
                        f"http://127.0.0.1:{front.port}/list_workers"))
    # The proxy has no list call: an add of no instances changes nothing and answers the current lists.
    return _post(front, "/instances/add", {"type": "prefill", "instances": []})


def parse_list(kind: str, text: str) -> frozenset[str]:
    """The backends the answer of a front of `kind` names, as `address:port` (ValueError: not its answer)."""
    return frozenset(parse_roles(kind, text))


def parse_roles(kind: str, text: str) -> dict[str, str]:
    """The answer of a front of `kind`: each backend it lists (`address:port`) with its role (the router's are
    mixed; the proxy lists prefill and decode apart). ValueError/KeyError/TypeError: not its answer."""
    doc = json.loads(text)
    if kind == ROUTER:
        return {url.split("://", 1)[-1].rstrip("/"): "mixed" for url in doc["urls"]}
    return {**{key: "prefill" for key in doc["current_prefill_instances"]},
            **{key: "decode" for key in doc["current_decode_instances"]}}


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
    wanted = {b.key: b for b in backends(spec, address_of)}
    gone = tuple(_listed_backend(key, role) for key, role in sorted(listed.items()) if key not in wanted)
    new = tuple(b for key, b in wanted.items() if key not in listed)
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


def _listed_backend(key: str, role: str) -> Backend:
    address, _, port = key.rpartition(":")
    return Backend(role, key, address, int(port) if port.isdigit() else 0)


def reach(spec: Spec, networks: Optional[Mapping] = None) -> dict[str, str]:
    """How one host reaches another's servers: vllm-ascend's derived address (what its proxy lists), else the
    spec's address (`local`: loopback)."""
    if networks is not None:
        return {name: network.address for name, network in networks.items()}
    return {h.name: "127.0.0.1" if h.is_local else h.address for h in spec.hosts}


def router_command(spec: Spec, instance: Instance, address_of: Optional[Mapping[str, str]]) -> tuple[str, ...]:
    """`vllm-router --host 0.0.0.0 --port P --prometheus-host 0.0.0.0 --prometheus-port M --worker-urls URL...
    [--policy P]`: every mixed API server (None: without the list, its identity). Its metrics listen on
    127.0.0.1:29000 unless told (vllm_router/router_args.py, 0.1.17): on all addresses here, for Prometheus."""
    words = [ROUTER_COMMAND, "--host", "0.0.0.0", "--port", str(instance.port)]
    if instance.metrics_port is not None:
        words += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(instance.metrics_port)]
    if address_of is not None:
        words += ["--worker-urls", *(b.url for b in backends(spec, address_of))]
    if spec.front_spec is not None and spec.front_spec.policy:
        words += ["--policy", spec.front_spec.policy]
    return tuple(words)


def router_container(spec: Spec, instance: Instance, address_of: Mapping[str, str]):
    """The vllm-router's container: its own image, no devices, the deployment's labels, host networking."""
    from deployctl.plan.container_types import LABEL_DEPLOYMENT, LABEL_INSTANCE, LABEL_ROLE, Container

    return Container(
        name=instance.name, instance=instance, image=(spec.front_spec.image if spec.front_spec else None) or "",
        devices=(), mounts=(), env=(), env_file=None, secret_env=(),
        labels=((LABEL_DEPLOYMENT, spec.name), (LABEL_ROLE, instance.role), (LABEL_INSTANCE, instance.name)),
        command=router_command(spec, instance, address_of), identity_command=router_command(spec, instance, None),
    )
