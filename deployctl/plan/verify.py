"""The verify stage of `up`: a smoke request through the endpoint (and, for mixed, every instance)."""

from __future__ import annotations

from deployctl.core import Command
from deployctl.plan.model import Stage, Step
from deployctl.servers import flavour_of
from deployctl.spec.model import Instance, Spec


def endpoint_url(spec: Spec) -> str:
    """The scheduler or proxy (disaggregated) or the first instance (mixed): where `up` says the deployment
    serves."""
    instance = spec.front or spec.api_servers[0]
    host = spec.host(instance.host)
    address = "127.0.0.1" if host.is_local else host.address
    return f"http://{address}:{instance.port}"


def smoke_targets(spec: Spec) -> tuple[Instance, ...]:
    """The endpoint (scheduler or proxy), or every API server for mixed."""
    if spec.front:
        return (spec.front,)
    return spec.api_servers


def smoke_command(spec: Spec, instance: Instance) -> Command:
    """POST the smoke request on the host's loopback; the body goes on stdin."""
    flavour = flavour_of(spec)
    path = flavour.smoke_path(spec)
    body = flavour.smoke_body(spec)
    return Command(
        ("curl", "--silent", "--show-error", "--fail-with-body", "--max-time", "120",
         "--header", "Content-Type: application/json", "--data-binary", "@-", f"http://127.0.0.1:{instance.port}{path}"),
        stdin=body,
    )


def server_ready_command(instance: Instance, path: str) -> Command:
    """A server-wide readiness (Triton's), checked before its smoke request."""
    return Command(("curl", "--silent", "--show-error", "--fail", "--max-time", "10", "--output", "/dev/null",
                    f"http://127.0.0.1:{instance.port}{path}"))


def plan_verify(spec: Spec) -> Stage:
    ready = flavour_of(spec).ready_path()
    return Stage("verify", tuple(
        Step(i.host, "verify", "run", f"smoke request to {i.name}", container=i.name,
             commands=((server_ready_command(i, ready),) if ready else ()) + (smoke_command(spec, i),))
        for i in smoke_targets(spec)
    ))
