"""vllm-ascend's load-balance proxy (pure): the P/D front of vllm-ascend, run in the server image by that flavour
(servers/vllm_ascend/upstream.py renders its command).

It changes its list with `POST /instances/add|remove` and `{"type": "prefill"|"decode", "instances":
["host:port", ...]}` (vllm-ascend HEAD:examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py:80-106,
`adjust_instances_impl`; added by vllm-ascend #5063, first in v0.13.0rc1). A removed instance with requests in
flight is tainted: no new request goes to it, and it leaves the list once they finish (`remove_instances`). Both
calls answer the current lists (`current_prefill_instances`, `current_decode_instances`); an add of nothing is how
the list is read."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from deployctl.core import Command
from deployctl.fronts.base import AnswerTarget, Backend, FrontKind, pd_pairs, post

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.spec.model import FrontSpec, Instance, Spec
    from deployctl.spec.rules import Context

# The proxy's add/remove arrived with vllm-ascend #5063 (v0.13.0rc1): release lines before it cannot change.
PROXY_CHANGES_FROM = (0, 13)
PROXY_STARTUP_BUDGET_S = 120  # an exported start-up probe's budget: the proxy loads no model


PROXY = "proxy"  # its kind


class Proxy(FrontKind):
    name = PROXY
    role = "proxy"
    drains = True
    title = "the proxy"
    modes = ("disaggregated",)

    def check(self, c: "Context", front: Mapping, path: tuple) -> Iterator["Problem"]:
        from deployctl.errors import Problem

        if c.mode == "mixed":
            yield Problem(path + ("kind",), "kind proxy is vllm-ascend's P/D proxy (it lists prefill and decode "
                                            "servers); a mixed deployment's front is kind vllm-router")
        for key in ("image", "policy", "metrics_port"):
            if key in front:
                yield Problem(path + (key,), f"front.{key} is for kind vllm-router; the proxy runs in the server "
                                             f"image with its own balancing", severity="warning")

    def instance(self, deployment: str, front: "FrontSpec", topology: Mapping,
                 upstream: bool) -> Optional["Instance"]:
        """vllm-ascend's P/D proxy; elsewhere the rules refuse it (check_front)."""
        from deployctl.spec.model import Instance

        if not upstream or topology["mode"] != "disaggregated":
            return None
        return Instance(role="proxy", index=0, host=front.host, devices=(), port=front.port,
                        name=f"{deployment}-proxy", tp=0,
                        path=("topology", "front" if "front" in topology else "proxy"))

    def startup_budget_s(self) -> Optional[float]:
        return PROXY_STARTUP_BUDGET_S

    def answer_targets(self, spec: "Spec", front: "Instance") -> tuple[AnswerTarget, ...]:
        """Each prefill x decode pairing (the decode answers once the prefill handed over), then the proxy."""
        return pd_pairs(spec, front)

    def why_fixed(self, spec: "Spec") -> str:
        if _changes(spec):
            return ""
        return ("vllm-ascend's proxy adds and removes instances from v0.13.0rc1 (vllm-ascend #5063); this image "
                f"runs {_release(spec)}")

    def change_commands(self, port: int, changed: tuple[Backend, ...], verb: str) -> tuple[Command, ...]:
        by_role: dict[str, list[str]] = {}
        for backend in changed:
            by_role.setdefault(backend.role, []).append(backend.key)
        return tuple(post(port, f"/instances/{verb}", {"type": role, "instances": keys})
                     for role, keys in by_role.items())

    def list_command(self, port: int) -> Command:
        # The proxy has no list call: an add of no instances changes nothing and answers the current lists.
        return post(port, "/instances/add", {"type": "prefill", "instances": []})

    def parse_roles(self, text: str) -> dict[str, str]:
        doc = json.loads(text)
        return {**{key: "prefill" for key in doc["current_prefill_instances"]},
                **{key: "decode" for key in doc["current_decode_instances"]}}


def _changes(spec: "Spec") -> bool:
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


def _release(spec: "Spec") -> str:
    version = getattr(spec.profile, "version", None)
    line = _profile_line(spec)
    return (f"v{version.major}.{version.minor}.{version.micro}" if version is not None
            else f"the {line[0]}.{line[1]} line" if line else "an older release")


def _profile_line(spec: "Spec") -> Optional[tuple[int, int]]:
    if spec.profile is None:
        return None
    major, _, minor = spec.profile.profile.line.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
