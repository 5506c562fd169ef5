"""A worker pod's command as a template (pure): one template serves every worker of a group, so its DP rank
comes from the controller's worker index and its DP master from the leader's address, resolved in the pod."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from deployctl.export.expansion import Expanded, kubelet_text
from deployctl.spec.model import Instance

ADDRESS_FLAG = "--data-parallel-address"
RANK_FLAGS = ("--data-parallel-start-rank", "--data-parallel-rank")  # internal, external


@dataclass(frozen=True)
class GangEnv:
    """The variables a gang controller sets in every pod of a group."""

    leader_address: str  # a DNS name of the leader pod
    worker_index: str  # 0 for the leader, 1.. for the workers


LWS = GangEnv("LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX")
KTHENA = GangEnv("ENTRY_ADDRESS", "WORKER_INDEX")


def worker_command(argv: tuple[str, ...], instance: Instance, env: GangEnv) -> tuple[str, ...]:
    """`sh -c` that resolves the leader (vLLM binds and connects its DP master by IP, as vllm-ascend's
    multi-node CI does with getent) and execs the server with its rank = index x ranks per host + local."""
    server = instance.server
    rank = f"$(({env.worker_index} * {server.group.ranks_per_host} + {server.ranks[0].local}))"
    raw = {ADDRESS_FLAG: '"$LEADER_IP"', **{flag: rank for flag in RANK_FLAGS}}
    words, replace_next = [], None
    for word in argv:
        # the shell, not the kubelet, expands deployctl's own `$`s; a spec's word reaches vLLM as written
        words.append(kubelet_text(replace_next) if replace_next
                     else shlex.quote(word) if isinstance(word, Expanded) else kubelet_text(shlex.quote(word)))
        replace_next = raw.get(word)
    script = (f'LEADER_IP=$(getent hosts "${env.leader_address}" | awk \'{{print $1}}\' | head -n 1); '
              f'[ -n "$LEADER_IP" ] || {{ echo "cannot resolve ${env.leader_address}" >&2; exit 1; }}; exec ')
    return ("sh", "-c", Expanded(kubelet_text(script) + " ".join(words)))
