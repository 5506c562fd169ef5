"""What a server flavour may be unable to do, each with its reason (pure). A flavour lists what it cannot do in
`Flavour.unsupported` (feature -> reason), as SkyPilot's clouds list theirs (`Cloud._CLOUD_UNSUPPORTED_FEATURES`,
a dict of `CloudImplementationFeatures` -> reason, checked by `check_features_are_supported`; sky/clouds/cloud.py).
`validate` and `export` refuse a spec that asks for one, at the key that asks, with the flavour's reason; `plan`
asks `Flavour.supports` instead of comparing platforms: never a silent skip."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable, Iterator

from deployctl.errors import Problem

if TYPE_CHECKING:
    from deployctl.servers.base import Flavour
    from deployctl.spec.model import Spec


class Feature(enum.Enum):
    OPENAI_API = "OpenAI API"  # /v1/completions: a front routes it, the answer check and smoke request ask it
    ONE_TOKEN_LIVENESS = "one-token liveness"  # `status` and `watch` tell a hung server by a one-token completion
    COMPILE_CACHE = "compile cache"  # cache.compile: its profile names where its compile caches live
    VERSION_PROFILES = "version profiles"  # server_version picks one of its profiles
    SURGE = "surge"  # rollout.max_surge: a replacement started on spare cards before the old one drains
    FRONT = "front"  # topology.front: a proxy or router in front of the instances
    DISAGGREGATED = "P/D disaggregation"  # topology.mode: disaggregated


# The spec key that asks for a feature, what to do instead, and whether a (valid) spec asks for it. A feature with
# no key (one-token liveness) is said in `validate`'s summary.
ASKED_AT: dict[Feature, tuple[tuple, str, Callable[["Spec"], Any]]] = {
    Feature.OPENAI_API: (("topology", "front"), "remove topology.front", lambda spec: spec.front_spec),
    Feature.COMPILE_CACHE: (("cache", "compile"), "remove cache.compile, or use server: vllm",
                            lambda spec: spec.cache.compile),
    Feature.VERSION_PROFILES: (("server_version",), "remove it, or use server: vllm-ascend",
                               lambda spec: spec.server_version),
    Feature.SURGE: (("rollout", "max_surge"), "remove rollout.max_surge: the drain rollout replaces "
                                              "rollout.max_unavailable instances at a time",
                    lambda spec: spec.rollout.max_surge),
    Feature.FRONT: (("topology", "front"), "remove topology.front", lambda spec: spec.front_spec),
    Feature.DISAGGREGATED: (("topology", "mode"), "use mode: mixed", lambda spec: spec.mode == "disaggregated"),
}
# A key whose mere presence does not ask for its feature: the value that does
ASKS_WHEN: dict[Feature, Callable[[Any], bool]] = {Feature.DISAGGREGATED: lambda mode: mode == "disaggregated"}


def _asks(value: Any) -> bool:
    """A key asks for its feature when present and not off (false, 0)."""
    return value is not None and value is not False and value != 0


def refused(flavour: "Flavour", asked: Callable[[tuple], Any]) -> Iterator[Problem]:
    """A Problem at each key that asks for what `flavour` cannot do, its message the flavour's reason.
    `asked(path)`: the value there in the document (None: absent or invalid)."""
    for feature, reason in flavour.unsupported.items():
        if feature in ASKED_AT:
            path, hint, _ = ASKED_AT[feature]
            if ASKS_WHEN.get(feature, _asks)(asked(path)):
                yield Problem(path, reason, hint=hint)


def refuses(flavour: "Flavour", path: tuple, value: Any) -> bool:
    """Whether `value` at `path` asks for something `flavour` cannot do (refused() says it, with the reason)."""
    return any(refused(flavour, lambda asked: value if asked == path else None))


def spec_refusals(flavour: "Flavour", spec: "Spec") -> Iterator[Problem]:
    """The same for a loaded spec (`export`)."""
    for feature, reason in flavour.unsupported.items():
        if feature in ASKED_AT:
            path, hint, of_spec = ASKED_AT[feature]
            if _asks(of_spec(spec)):
                yield Problem(path, reason, hint=hint)


def unasked(flavour: "Flavour") -> list[str]:
    """What the flavour cannot do that no key asks for: said on `validate`'s summary, each with its reason."""
    return [f"{feature.value}: {reason}" for feature, reason in flavour.unsupported.items()
            if feature not in ASKED_AT]
