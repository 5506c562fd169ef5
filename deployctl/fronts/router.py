"""vLLM's router (`vllm-router` on PyPI, 0.1.17) in front of mixed servers (pure): deployctl runs it on an image of
its own, whatever the servers' flavour.

`POST /add_worker?url=URL`, `POST /remove_worker?url=URL`, `GET /list_workers` -> `{"urls": [...]}`
(vllm-project/router src/server.rs, `admin_routes`); started with `--worker-urls URL ...`, `--policy`, `--host`,
`--port` (vllm_router/router_args.py, `add_cli_args`). It starts with no workers at all (`--worker-urls` is
`nargs="*"`; an empty Regular-mode list passes src/config/validation.rs `validate_mode`, and 0.1.17 logs
`Router ready | workers: []`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator, Mapping, Optional
from urllib.parse import quote

from deployctl.core import Command
from deployctl.fronts.base import CALL_TIMEOUT, AnswerTarget, Backend, FrontKind, RouterMetrics, backends, post

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.plan.container_types import Container
    from deployctl.spec.model import FrontSpec, Instance, Spec
    from deployctl.spec.rules import Context

ROUTER_COMMAND = "vllm-router"  # the wheel's console script (vllm_router.launch_router:main)
ROUTER_HEALTH_PATH = "/liveness"  # answers once the router serves, whatever its workers do (src/server.rs)
# vllm-router's own default (29000, vllm_router/router_args.py) is a kv port of group 10 on 8-NPU hosts (28000 +
# 100 x group): its metrics go below Mooncake's random range [20000, ...) and every default kv port instead
DEFAULT_ROUTER_METRICS_PORT = 19000
ROUTER_IMAGE_HINT = ("vLLM's router has no official image: build one from its PyPI wheel "
                     "(`docker build -t vllm-router:0.1.17 images/vllm-router`) and write front.image")


ROUTER = "vllm-router"  # its kind
# Its own metrics (vllm-project/router src/metrics.rs, RouterMetrics; each series appears at its first event):
# requests by route, each worker's requests and health, the workers it routes to, and a generate request's duration
# (a histogram with the crate's duration buckets, start_prometheus). vllm_router_running_requests is the
# cache_aware policy's only (metrics.rs), so no panel reads it
ROUTER_METRICS = RouterMetrics(requests="vllm_router_requests_total", route_label="route",
                               per_worker="vllm_router_processed_requests_total",
                               health="vllm_router_worker_health", pool="vllm_router_active_workers",
                               duration="vllm_router_generate_duration_seconds")


class Router(FrontKind):
    name = ROUTER
    role = "router"
    launch: tuple[str, ...] = (ROUTER_COMMAND,)  # the words that start it, before its flags
    drains = True
    title = "the vllm-router"
    modes = ("mixed",)
    default_metrics_port = DEFAULT_ROUTER_METRICS_PORT
    metrics = ROUTER_METRICS
    # what validate says of it in front of P/D servers (message, hint), and where its image comes from
    disaggregated_refusal = ("deployctl runs vllm-router in front of mixed servers only; vllm-ascend's P/D (the "
                             "Mooncake connector) is fronted by its own proxy", "kind: proxy")
    image_hint = ROUTER_IMAGE_HINT

    def check(self, c: "Context", front: Mapping, path: tuple) -> Iterator["Problem"]:
        from deployctl.errors import Problem

        if c.mode not in self.modes:
            message, hint = self.disaggregated_refusal
            yield Problem(path + ("kind",), message, hint=hint)
        if "image" not in front:
            yield Problem(path, f"kind {self.name} needs front.image", hint=self.image_hint)

    def instance(self, deployment: str, front: "FrontSpec", topology: Mapping,
                 upstream: bool) -> Optional["Instance"]:
        from deployctl.spec.model import Instance

        return Instance(role=self.role, index=0, host=front.host, devices=(), port=front.port,
                        name=f"{deployment}-router", tp=0, path=("topology", "front"),
                        metrics_port=front.metrics_port)

    def container(self, spec: "Spec", instance: "Instance",
                  address_of: Mapping[str, str]) -> Optional["Container"]:
        return router_container(spec, instance, address_of, self.launch, self.worker_words)

    def worker_words(self, spec: "Spec", address_of: Optional[Mapping[str, str]]) -> tuple[str, ...]:
        """The flags that give it its workers (address_of None: what of them stays in its identity)."""
        return worker_urls(spec, address_of)

    def health_path(self) -> Optional[str]:
        return ROUTER_HEALTH_PATH

    def pulls_own_image(self) -> bool:
        return True

    def metrics_port(self, instance: "Instance") -> Optional[int]:
        return instance.metrics_port

    def export_refusal(self, spec: "Spec") -> Optional[tuple[str, str]]:
        return (f"the {self.name} front (topology.front) is not exported: on a cluster the deployment's Service "
                "balances its servers, and a rollout drains them by readiness",
                "remove topology.front from a copy of the spec to export it")

    def answer_targets(self, spec: "Spec", front: "Instance") -> tuple[AnswerTarget, ...]:
        """Each mixed server, then the router."""
        return tuple((i.name, i, None) for i in spec.api_servers if i is not front) + ((front.name, front, None),)

    def why_fixed(self, spec: "Spec") -> str:
        return ""

    def change_commands(self, port: int, changed: tuple[Backend, ...], verb: str) -> tuple[Command, ...]:
        return tuple(post(port, f"/{verb}_worker?url={quote(b.url, safe='')}") for b in changed)

    def list_command(self, port: int) -> Command:
        return Command(("curl", "--silent", "--show-error", "--fail", "--max-time", CALL_TIMEOUT,
                        f"http://127.0.0.1:{port}/list_workers"))

    def parse_roles(self, text: str) -> dict[str, str]:
        """The router's workers are mixed servers."""
        return {url.split("://", 1)[-1].rstrip("/"): "mixed" for url in json.loads(text)["urls"]}


def worker_urls(spec: "Spec", address_of: Optional[Mapping[str, str]]) -> tuple[str, ...]:
    """`--worker-urls URL...`: every mixed API server (none in its identity: adding one does not replace it)."""
    return ("--worker-urls", *(b.url for b in backends(spec, address_of))) if address_of is not None else ()


def router_command(spec: "Spec", instance: "Instance", address_of: Optional[Mapping[str, str]],
                   launch: tuple[str, ...] = (ROUTER_COMMAND,), worker_words=None) -> tuple[str, ...]:
    """`vllm-router --host 0.0.0.0 --port P --prometheus-host 0.0.0.0 --prometheus-port M --worker-urls URL...
    [--policy P]`: every mixed API server (None: without the list, its identity). Its metrics listen on
    127.0.0.1:29000 unless told (vllm_router/router_args.py, 0.1.17): on all addresses here, for Prometheus.
    sglang-router, which vllm-router forked, takes the same flags after its own `launch` words, and its own
    `worker_words` (its P/D mode's)."""
    words = [*launch, "--host", "0.0.0.0", "--port", str(instance.port)]
    if instance.metrics_port is not None:
        words += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(instance.metrics_port)]
    words += (worker_words or worker_urls)(spec, address_of)
    if spec.front_spec is not None and spec.front_spec.policy:
        words += ["--policy", spec.front_spec.policy]
    return tuple(words)


def router_container(spec: "Spec", instance: "Instance", address_of: Mapping[str, str],
                     launch: tuple[str, ...] = (ROUTER_COMMAND,), worker_words=None) -> "Container":
    """A router's container (vllm-router's, or sglang-router's by its `launch`): its own image, no devices, the
    deployment's labels, host networking."""
    from deployctl.plan.container_types import LABEL_DEPLOYMENT, LABEL_INSTANCE, LABEL_ROLE, Container

    return Container(
        name=instance.name, instance=instance, image=(spec.front_spec.image if spec.front_spec else None) or "",
        devices=(), mounts=(), env=(), env_file=None, secret_env=(),
        labels=((LABEL_DEPLOYMENT, spec.name), (LABEL_ROLE, instance.role), (LABEL_INSTANCE, instance.name)),
        command=router_command(spec, instance, address_of, launch, worker_words),
        identity_command=router_command(spec, instance, None, launch, worker_words),
    )
