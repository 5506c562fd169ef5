"""The interface every front kind implements (pure): what `validate`, `plan`, rollout and `watch` ask of the
scheduler, the proxy or a router instead of comparing its kind. One module per kind, one `FrontKind` subclass;
the defaults here are a front's that cannot change its list."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from deployctl.core import Command

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.plan.container_types import Container
    from deployctl.spec.model import FrontSpec, Instance, Spec
    from deployctl.spec.rules import Context

CALL_TIMEOUT = "10"  # seconds for one control call to the front


@dataclass(frozen=True)
class Backend:
    """One API server behind the front, as the front names it."""

    role: str  # mixed | prefill | decode
    name: str  # its container
    address: str  # as the front reaches it
    port: int
    bootstrap_port: Optional[int] = None  # an SGLang prefill's: where its decode partners ask for its KV

    @property
    def key(self) -> str:
        """`address:port`: the proxy's name for it."""
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        """`http://address:port`: the router's name for it."""
        return f"http://{self.address}:{self.port}"


@dataclass(frozen=True)
class RouterMetrics:
    """The names a router's own /metrics writes, as the monitoring pack's router panels draw them."""

    requests: str  # counter of requests, by `route_label`
    route_label: str
    per_worker: str  # counter of requests per worker (label `worker`)
    health: str  # gauge per worker (label `worker`): 1 healthy, 0 not
    pool: str  # gauge: the workers it routes to
    duration: str  # histogram of a request's duration


# One way the answer check asks through a front: (label, the instance that answers, the prefill it first asks).
AnswerTarget = tuple[str, "Instance", Optional["Instance"]]


class FrontKind:
    """One kind of front: how the spec writes it, how it runs, and how it lists, adds and removes backends."""

    name: str = ""  # its `topology.front.kind` (and `Front.kind`)
    role: str = ""  # the role of the instance that runs it
    title: str = "the front"  # how a port message names it
    modes: tuple[str, ...] = ()  # the topology modes `topology.front` may front with it
    own_entry: bool = True  # its port is the front's (topology.front/proxy), not one of a flavour's instances'
    drains: bool = False  # a drain rollout can take servers out through it (where its version changes its list)
    default_metrics_port: Optional[int] = None  # where its own metrics listen unless the spec says
    metrics: Optional[RouterMetrics] = None  # the names its own metrics write (None: it serves none)

    # --- the spec ---------------------------------------------------------------------------------------------
    def check(self, c: "Context", front: Mapping, path: tuple) -> Iterator["Problem"]:
        """The rules of a `topology.front` of this kind (at `path`), beyond its host."""
        return iter(())

    def instance(self, deployment: str, front: "FrontSpec", topology: Mapping,
                 upstream: bool) -> Optional["Instance"]:
        """The instance that runs it, where deployctl starts it as the spec's front (None: a flavour's own)."""
        return None

    # --- how it runs ------------------------------------------------------------------------------------------
    def container(self, spec: "Spec", instance: "Instance",
                  address_of: Mapping[str, str]) -> Optional["Container"]:
        """Its container where it runs on an image of its own (None: the flavour assembles it)."""
        return None

    def health_path(self) -> Optional[str]:
        """What answers 200 once it serves, where it is its own (None: its flavour's health path)."""
        return None

    def pulls_own_image(self) -> bool:
        """True when `docker run` pulls its image: the deployment's server image does not concern it."""
        return False

    def startup_budget_s(self) -> Optional[float]:
        """An exported start-up probe's budget where it loads no model (None: its server's, from the model load)."""
        return None

    def metrics_port(self, instance: "Instance") -> Optional[int]:
        """Where its own metrics listen (None: it serves none; Prometheus probes its health instead)."""
        return None

    def export_refusal(self, spec: "Spec") -> Optional[tuple[str, str]]:
        """(message, hint) where no export target can express this front (None: the export carries it)."""
        return None

    def answer_targets(self, spec: "Spec", front: "Instance") -> tuple[AnswerTarget, ...]:
        """The paths the answer check asks through this front, each answered by one instance."""
        return ()

    # --- its list ---------------------------------------------------------------------------------------------
    def why_fixed(self, spec: "Spec") -> str:
        """Why it cannot change its list while serving ('' where it can)."""
        return "its workers are fixed when it starts"

    def change_commands(self, port: int, changed: tuple[Backend, ...], verb: str) -> tuple[Command, ...]:
        """`verb` (add | remove) the backends `changed`, on its host."""
        raise ValueError(f"the {self.name} front cannot change its list")

    def list_command(self, port: int) -> Command:
        """What it routes to now (parse_roles reads the answer)."""
        raise ValueError(f"the {self.name} front cannot list its backends")

    def parse_roles(self, text: str) -> dict[str, str]:
        """Each backend its list answer names (`address:port`) with its role. ValueError/KeyError/TypeError: not
        its answer."""
        raise ValueError(f"the {self.name} front has no list")


def post(port: int, path: str, body: Optional[dict] = None) -> Command:
    """A control call to a front on its own host."""
    words = ["curl", "--silent", "--show-error", "--fail-with-body", "--max-time", CALL_TIMEOUT, "--request", "POST"]
    if body is not None:
        words += ["--header", "Content-Type: application/json", "--data-binary",
                  json.dumps(body, separators=(",", ":"))]
    return Command((*words, f"http://127.0.0.1:{port}{path}"))


def backends(spec: "Spec", address_of: Mapping[str, str]) -> tuple[Backend, ...]:
    """Every API server the front routes to, in spec order (headless servers serve no API)."""
    front = spec.front
    return tuple(Backend(i.role, i.name, address_of[i.host], i.port, i.bootstrap_port) for i in spec.api_servers
                 if i is not front and i.role in ("mixed", "prefill", "decode"))


def pd_pairs(spec: "Spec", front: "Instance") -> tuple[AnswerTarget, ...]:
    """Each prefill x decode pairing (the decode answers what the prefill prefilled), then the front itself."""
    prefills = [i for i in spec.api_servers if i.role == "prefill"]
    decodes = [i for i in spec.api_servers if i.role == "decode"]
    return tuple((f"{p.name} -> {d.name}", d, p) for p in prefills for d in decodes) + ((front.name, front, None),)
