"""The names every flavour writes a metric under (pure): what generic readers of any server's /metrics (bench's
telemetry, `watch`, a drain's in-flight count) know it by, from the flavours the registry holds."""

from __future__ import annotations

import os

from deployctl.servers.metrics import OLDER_NAMES
from deployctl.servers.registry import FLAVOURS


def names_of(field: str) -> tuple[str, ...]:
    """Every name a server writes `field` under (a ServerMetrics field), vLLM v1's first."""
    sets = dict.fromkeys(f.metrics for f in FLAVOURS.values())  # in registry order: vLLM v1's first
    found = [getattr(s, field) for s in sets] + list(OLDER_NAMES.get(field, ()))
    return tuple(dict.fromkeys(n for n in found if n))


def line_pattern(*fields: str) -> str:
    """An ERE that matches the sample names of `fields` at a line's start, one alternative per name prefix:
    `vllm:num_requests_(running|waiting)`, or `(vllm:num_requests_(running|waiting)|sglang:num_(running|queue)_reqs)`."""
    names = [n for field in fields for n in names_of(field)]
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.split(":", 1)[0], []).append(name)
    parts = [_one_prefix(group) for group in groups.values()]
    return parts[0] if len(parts) == 1 else f"({'|'.join(parts)})"


def _one_prefix(names: list[str]) -> str:
    prefix = names[0] if len(names) == 1 else os.path.commonprefix(names)
    rest = [n[len(prefix):] for n in names]
    return prefix + (f"({'|'.join(rest)})" if len(names) > 1 else "")
