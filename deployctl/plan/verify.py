"""The verify stage of `up`: a smoke request through the endpoint (and, for mixed, every instance)."""

from __future__ import annotations

import json

from deployctl.core import Command
from deployctl.plan.model import Stage, Step
from deployctl.servers import flavour_of
from deployctl.servers.features import Feature
from deployctl.spec.model import Instance, Spec

SMOKE_PROMPT = "Say hello in one short sentence."
ONE_TOKEN_PATH = "/v1/completions"


def endpoint_url(spec: Spec) -> str:
    """The scheduler or proxy (disaggregated) or the first instance (mixed): where `up` says the deployment
    serves."""
    instance = spec.front or spec.api_servers[0]
    host = spec.host(instance.host)
    address = "127.0.0.1" if host.is_local else host.address
    return f"http://{address}:{instance.port}"


def smoke_request_body(spec: Spec) -> bytes:
    """`/v1/chat/completions`, temperature 0: what the runbook's curl sends."""
    return json.dumps({
        "model": spec.model.served_name,
        "messages": [{"role": "user", "content": SMOKE_PROMPT}],
        "max_tokens": 32,
        "temperature": 0,
        "stream": False,
    }).encode()


def completion_body(spec: Spec, prompt: str, max_tokens: int) -> bytes:
    """A greedy, non-streaming `/v1/completions` request (compact JSON)."""
    return json.dumps({"model": spec.model.served_name, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": False}, separators=(",", ":")).encode()


def one_token_body(spec: Spec) -> bytes:
    """The cheapest real generate: one greedy token (the hang watch of `status` and the end of `up`)."""
    return completion_body(spec, "ping", 1)


def triton_smoke_body() -> bytes:
    """Triton's generate extension: the vLLM backend's inputs as top-level keys, greedy."""
    return json.dumps({"text_input": SMOKE_PROMPT, "parameters": {"stream": False, "temperature": 0}}).encode()


def smoke_targets(spec: Spec) -> tuple[Instance, ...]:
    """The endpoint (scheduler or proxy), or every API server for mixed."""
    if spec.front:
        return (spec.front,)
    return spec.api_servers


def smoke_command(spec: Spec, instance: Instance) -> Command:
    """POST the smoke request on the host's loopback; the body goes on stdin."""
    flavour = flavour_of(spec)
    path = flavour.smoke_path(spec)
    body = smoke_request_body(spec) if flavour.supports(Feature.OPENAI_API) else triton_smoke_body()
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
