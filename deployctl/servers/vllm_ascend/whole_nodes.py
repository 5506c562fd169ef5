"""Whole-node pods (pure): on a stack that allocates a pod's NPUs to one container, a host's DP ranks run as ONE
`vllm serve` with vLLM's internal DP launch (--data-parallel-size-local = the ranks on the host) instead of one
container per rank (dp_launch: external)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from deployctl.servers.vllm_ascend.groups import servers_of, with_server
from deployctl.spec.model import Spec

if TYPE_CHECKING:
    from deployctl.export.stacks import NpuStack


def needs_rewrite(spec: Spec, stack: "NpuStack") -> bool:
    """True when the stack wants one container per pod and the spec runs a container per DP rank."""
    return stack.whole_nodes and spec.upstream is not None and spec.upstream.dp_launch == "external"


def one_container_per_pod(spec: Spec, stack: "NpuStack") -> Spec:
    """The spec as `dp_launch: internal` would have written it where the stack needs whole nodes (else as is):
    each group's ranks on one host become one instance holding all their devices; the first host's serves the
    API, the others run headless (as `up` runs an internal launch)."""
    if not needs_rewrite(spec, stack):
        return spec
    upstream = replace(spec.upstream, dp_launch="internal")
    cards = spec.requirements.cards
    out, counts = [], {}
    for instance in spec.instances:
        server = instance.server
        if server is None:  # the proxy: unchanged
            out.append(instance)
            continue
        if server.ranks[0].local != 0:  # folded into its host's first rank
            continue
        internal = next(s for s in servers_of(server.group, cards, "internal") if s.host == instance.host)
        index = counts.get(instance.role, 0)
        counts[instance.role] = index + 1
        out.append(with_server(replace(instance, index=index, devices=internal.devices, port=internal.port,
                                       name=f"{spec.name}-{internal.name}"), internal))
    return replace(spec, upstream=upstream, instances=tuple(out))
