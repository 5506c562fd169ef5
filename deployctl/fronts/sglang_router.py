"""SGLang's router (`sglang-router` on PyPI, 0.3.2, the "SGLang Model Gateway") in front of server sglang's mixed
instances (pure): deployctl runs it on an image of its own, as it runs vllm-router (a fork of it, fronts/router.py).

Its flags are the wheel's sglang_router/router_args.py (`RouterArgs.add_cli_args`): `--host`, `--port`,
`--worker-urls URL ...` (`nargs="*"`: it starts with none), `--policy` (random | round_robin | cache_aware |
power_of_two | manual), `--prometheus-host`/`--prometheus-port` (its own metrics, on 0.0.0.0:29000 unless told;
a second router or a kv port there makes it panic at start: "failed to install Prometheus metrics exporter").
`python -m sglang_router.launch_router ARGS` parses them (launch_router.py `parse_router_args`; the console script
`sglang-router` wants a `launch` word first, cli.py).

Its list is the worker API of sgl-model-gateway/src/server.rs (`build_app`) and src/core/worker_service.rs:
`GET /workers` -> `{"workers": [{"id": UUID, "url": URL, ..., "worker_type": "regular", "is_healthy": true, ...}],
"total": N, ...}`; `POST /workers {"url": URL}` and `DELETE /workers/{id}` queue a job and answer 202 at once
(the list changes once the job ran); DELETE takes the worker's UUID only (`parse_worker_id`: "Invalid worker_id
... (expected UUID)"). vllm-router's `/add_worker`, `/remove_worker` and `/list_workers` answer 404 in 0.3.2 (all
of this as the 0.3.2 wheel answered on loopback). `/liveness` is 200 once it serves, whatever its workers do;
`/readiness` is 503 until a worker is healthy."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from deployctl.core import Command
from deployctl.fronts.base import CALL_TIMEOUT, AnswerTarget, Backend, RouterMetrics, backends, pd_pairs
from deployctl.fronts.router import Router

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.spec.model import Instance, Spec
    from deployctl.spec.rules import Context

SGLANG_ROUTER = "sglang-router"  # its kind, and the role of the instance that runs it
VERSION = "0.3.2"
LAUNCH_ROUTER = ("python3", "-m", "sglang_router.launch_router")
HEALTH_PATH = "/liveness"  # src/server.rs `liveness`: 200 once it serves
# Its own default (29000, router_args.py) is a kv port of group 10 on 8-NPU hosts, as vllm-router's is: the same
# default as deployctl gives vllm-router (fronts/router.py)
DEFAULT_METRICS_PORT = 19000
# Its own metrics (the SGLang Model Gateway's `smg_` names, as 0.3.2 wrote them on loopback, regular and P/D mode):
# HTTP requests by path, each routed request's outcome per worker (its circuit breaker's count, the one per-worker
# counter of both modes: smg_worker_requests_active appears in P/D mode only), each worker's health (1/0), its
# workers by type, a routed request's duration
SGLANG_ROUTER_METRICS = RouterMetrics(requests="smg_http_requests_total", route_label="path",
                                      per_worker="smg_worker_cb_outcomes_total",
                                      health="smg_worker_health", pool="smg_worker_pool_size",
                                      duration="smg_router_request_duration_seconds")
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")  # router_args.py --policy choices
CHANGE_BOUND_S = 30  # how long a change may take to show in its list (its job queue runs it in the background)
IMAGE_HINT = (f"SGLang's router has no image of its own: build one from its PyPI wheel (a python image with `pip "
              f"install sglang-router=={VERSION}`, which brings python3 -m sglang_router.launch_router) and write "
              "front.image")

# args: router port, bound (s), worker URL. Its DELETE takes the worker's id: read from GET /workers (one object a
# line once split at `{`; "id" comes before "url" in WorkerInfo), then wait until the list no longer holds the
# URL, so that the drain that follows counts only requests it sent before. A URL it does not list is not there to
# take out.
REMOVE_SCRIPT = r'''p=$1; n=$2; u=$3; w=http://127.0.0.1:$p/workers
list() { curl --silent --show-error --fail --max-time 10 "$w"; }
a=$(list) || { echo "sglang-router on port $p did not answer GET /workers" >&2; exit 1; }
id=$(printf '%s\n' "$a" | tr '{' '\n' | grep -F "\"url\":\"$u\"" \
  | sed -n 's/^"id":"\([0-9A-Fa-f-]*\)".*/\1/p' | head -n 1)
[ -n "$id" ] || exit 0
curl --silent --show-error --fail-with-body --max-time 10 --request DELETE "$w/$id" >/dev/null || exit 1
i=0; while [ "$i" -lt "$((n * 5))" ]; do
  case "$(list)" in *"\"url\":\"$u\""*) sleep 0.2; i=$((i + 1));; *) exit 0;; esac
done
echo "sglang-router on port $p still lists $u $n s after DELETE /workers/$id" >&2; exit 1'''

# args: router port, bound (s), worker URL, the POST's body. Its POST answers before the worker is in: wait until it
# is listed healthy (the router routes to healthy workers only), so that the next wave's drain never leaves it
# none. A URL it lists already is not added twice.
ADD_SCRIPT = r'''p=$1; n=$2; u=$3; b=$4; w=http://127.0.0.1:$p/workers
list() { curl --silent --show-error --fail --max-time 10 "$w"; }
healthy() { printf '%s\n' "$1" | tr '{' '\n' | grep -F "\"url\":\"$u\"" | grep -q '"is_healthy":true'; }
a=$(list) || { echo "sglang-router on port $p did not answer GET /workers" >&2; exit 1; }
case "$a" in *"\"url\":\"$u\""*) ;; *)
  curl --silent --show-error --fail-with-body --max-time 10 --request POST --header "Content-Type: application/json" \
    --data-binary "$b" "$w" >/dev/null || exit 1;;
esac
i=0; while [ "$i" -lt "$((n * 5))" ]; do
  a=$(list) && healthy "$a" && exit 0
  sleep 0.2; i=$((i + 1))
done
echo "sglang-router on port $p does not list $u as healthy $n s after POST /workers" >&2; exit 1'''


class SglangRouter(Router):
    """vllm-router's container, instance, checks, answer targets and export refusal (fronts/router.py; the same
    flags, after its own launch words); its own P/D refusal, image hint, policy check, health path and worker API."""

    name = SGLANG_ROUTER
    role = SGLANG_ROUTER
    launch = LAUNCH_ROUTER
    title = "the sglang-router"
    modes = ("mixed", "disaggregated")  # disaggregated: its P/D mode, before server sglang's P/D servers
    default_metrics_port = DEFAULT_METRICS_PORT
    metrics = SGLANG_ROUTER_METRICS
    image_hint = IMAGE_HINT

    def check(self, c: "Context", front: Mapping, path: tuple) -> Iterator["Problem"]:
        from deployctl.errors import Problem

        yield from super().check(c, front, path)
        policy = c.value(path + ("policy",), str)
        if policy is not None and policy not in POLICIES:
            yield Problem(path + ("policy",), f"sglang-router {VERSION} has no policy {policy!r} (its --policy "
                                              f"takes {', '.join(POLICIES)})", hint="policy: round_robin")

    def worker_words(self, spec: "Spec", address_of: Optional[Mapping[str, str]]) -> tuple[str, ...]:
        """P/D: `--pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL ...` (router_args.py: `--prefill
        URL [BOOTSTRAP_PORT]`, `--decode URL`; the mode stays in its identity, the lists do not); mixed: vllm-router's
        `--worker-urls`."""
        if spec.mode != "disaggregated":
            return super().worker_words(spec, address_of)
        words: tuple[str, ...] = ("--pd-disaggregation",)
        for backend in backends(spec, address_of) if address_of is not None else ():
            if backend.role == "prefill":
                words += ("--prefill", backend.url, str(backend.bootstrap_port or "none"))
            else:
                words += ("--decode", backend.url)
        return words

    def answer_targets(self, spec: "Spec", front: "Instance") -> tuple[AnswerTarget, ...]:
        """P/D: each prefill x decode pairing, then the router; mixed: each server, then the router."""
        if spec.mode == "disaggregated":
            return pd_pairs(spec, front)
        return super().answer_targets(spec, front)

    def export_refusal(self, spec: "Spec") -> Optional[tuple[str, str]]:
        if spec.mode == "disaggregated":  # no Service can stand in for it
            return ("server sglang's P/D servers answer only requests that carry a bootstrap room, which "
                    "sglang-router's P/D mode adds: the exports carry no router, and a cluster's Service cannot "
                    "pair a prefill with a decode", "export a mode: mixed spec, or run the P/D deployment with up")
        return super().export_refusal(spec)

    def health_path(self) -> Optional[str]:
        return HEALTH_PATH

    def change_commands(self, port: int, changed: tuple[Backend, ...], verb: str) -> tuple[Command, ...]:
        what = "put into" if verb == "add" else "taken out of"
        return tuple(Command(("sh", "-c", ADD_SCRIPT if verb == "add" else REMOVE_SCRIPT, "sh", str(port),
                              str(CHANGE_BOUND_S), b.url) + ((worker_body(b),) if verb == "add" else ()),
                             failure=f"{b.url} was not {what} the sglang-router on port {port}") for b in changed)

    def list_command(self, port: int) -> Command:
        return Command(("curl", "--silent", "--show-error", "--fail", "--max-time", CALL_TIMEOUT,
                        f"http://127.0.0.1:{port}/workers"))

    def parse_roles(self, text: str) -> dict[str, str]:
        """Its regular workers are mixed servers (worker_type "regular"); P/D's are listed by their type."""
        return {w["url"].split("://", 1)[-1].rstrip("/"): _role(w.get("worker_type"))
                for w in json.loads(text)["workers"]}


def worker_body(backend: Backend) -> str:
    """POST /workers' body (WorkerConfigRequest, src/protocols/worker_spec.rs: url, worker_type "regular" |
    "prefill" | "decode", bootstrap_port for a prefill)."""
    doc: dict = {"url": backend.url}
    if backend.role in ("prefill", "decode"):
        doc["worker_type"] = backend.role
    if backend.role == "prefill" and backend.bootstrap_port is not None:
        doc["bootstrap_port"] = backend.bootstrap_port
    return json.dumps(doc, separators=(",", ":"))


def _role(worker_type) -> str:
    if worker_type == "regular":
        return "mixed"
    if isinstance(worker_type, dict) and worker_type:  # {"prefill": {...}} in P/D mode
        return str(next(iter(worker_type)))
    return str(worker_type)

