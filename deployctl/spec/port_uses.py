"""The ports a deployment binds, as the one set spec/port_set.py checks (pure): one user of a port, and the
builders of the kinds every flavour shares (the front's). Neutral: a flavour that lays out its own servers' ports
(servers/vllm_ascend/ports.py) builds them here, below the flavours as plan/container_types.py is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from deployctl.errors import Problem
from deployctl.fronts import front_kind

if TYPE_CHECKING:
    from deployctl.spec.rules import Context

Path = tuple
DEPLOYMENT, HOST = "deployment", "host"  # who binds a port: a container deployctl starts, or the host's own exporter
MAX_PORT = 65535
DEFAULT_PROXY_PORT = 8000  # a front's port where the spec writes none


def dotted(path: Path) -> str:
    return Problem(path).dotted_path


@dataclass(frozen=True)
class PortUse:
    """One port one user binds on one host."""

    host: str
    port: int
    name: str  # how a message names its user: "prefill group 0 kv ports 28000-28015", or a key itself
    path: Path  # the key that sets it (its unit's or the front's where a default does): a collision is said there
    where: str = ""  # the key, when `name` is not it: "topology.prefill[0].kv_port"
    default: str = ""  # the default that sets it, when no key does: "default port 9000"
    owner: str = DEPLOYMENT

    @property
    def user(self) -> tuple:
        return self.host, self.name, self.path, self.default

    def said(self, line: int = 0) -> str:
        """`prefill group 0 kv ports 28000-28015 (topology.prefill[0], line 16)`."""
        parts = [p for p in (self.where, self.default, f"line {line}" if line else "") if p]
        return self.name + (f" ({', '.join(parts)})" if parts else "")


def front_port(path: Path, host: str, port: Optional[int], name: str, default_port: int) -> PortUse:
    """The front (vllm-ascend's proxy, a vllm-router): its port, or the default it listens on."""
    if port is None:
        return PortUse(host, default_port, name, path, where=dotted(path), default=f"default port {default_port}")
    return PortUse(host, port, name, path + ("port",), where=dotted(path + ("port",)))


def router_metrics_port(path: Path, host: str, port: Optional[int], default_port: int) -> PortUse:
    """A vllm-router front's --prometheus-port: the key's value, or the default deployctl passes."""
    name = "the vllm-router's metrics port"
    if port is None:
        return PortUse(host, default_port, name, path, where=dotted(path),
                       default=f"default metrics_port {default_port}")
    return PortUse(host, port, name, path + ("metrics_port",), where=dotted(path + ("metrics_port",)))


def document_router_metrics(c: "Context", host: str) -> list[PortUse]:
    kind = front_kind(c.value(("topology", "front", "kind"), str))
    if kind is None or kind.default_metrics_port is None:
        return []
    front = c.value(("topology", "front"), dict) or {}
    port = c.value(("topology", "front", "metrics_port"), int)
    if "metrics_port" in front and port is None:
        return []  # a value the schema refused: said there
    return [router_metrics_port(("topology", "front"), host, port, kind.default_metrics_port)]


def front_name(kind: Optional[str]) -> str:
    found = front_kind(kind)
    return found.title if found is not None else "the front"


def ids(numbers: Sequence[int]) -> str:
    """`0-3,8`: consecutive runs shortened."""
    if not numbers:
        return "none"
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" if len(r) > 2 else f"{r[0]},{r[1]}"
                    for r in runs)
