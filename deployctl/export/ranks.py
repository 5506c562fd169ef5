"""A worker pod's command as a template (pure): one template serves every worker of a group, so its DP rank
comes from the controller's worker index and its DP master from the leader's address, resolved in the pod."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Mapping

from deployctl.export.expansion import Expanded, kubelet_text

LEADER_IP = '"$LEADER_IP"'  # the leader's IP as a worker's shell has it once leader_wait has run
# A worker may start before the leader's DNS record exists (the headless Service publishes it once the leader pod
# has an IP). Resolving once and exiting restarts the whole group under RecreateGroupOnPodRestart
# (kubernetes-sigs/lws#746), so the worker waits: every LEADER_RETRY_S up to LEADER_WAIT_S. The bound is
# vllm-ascend's own multi-node CI's (tests/e2e/nightly/multi_node/scripts/utils.py dns_resolver: 240 tries,
# 0.5 s backing off to 5 s, about 20 minutes), as long as the default start-up budget (spec/startup.py).
LEADER_RETRY_S = 2
LEADER_WAIT_S = 1200


@dataclass(frozen=True)
class GangEnv:
    """The variables a gang controller sets in every pod of a group."""

    leader_address: str  # a DNS name of the leader pod
    worker_index: str  # 0 for the leader, 1.. for the workers


LWS = GangEnv("LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX")
KTHENA = GangEnv("ENTRY_ADDRESS", "WORKER_INDEX")


def worker_command(argv: tuple[str, ...], raw: Mapping[str, str], env: GangEnv) -> tuple[str, ...]:
    """`sh -c` that resolves the leader (vLLM binds and connects its DP master by IP, as vllm-ascend's multi-node
    CI does with getent) and execs the server with `raw`'s shell text (flavour.worker_values) after its flags."""
    words, replace_next = [], None
    for word in argv:
        # the shell, not the kubelet, expands deployctl's own `$`s; a spec's word reaches vLLM as written
        words.append(kubelet_text(replace_next) if replace_next
                     else shlex.quote(word) if isinstance(word, Expanded) else kubelet_text(shlex.quote(word)))
        replace_next = raw.get(word)
    return ("sh", "-c", Expanded(kubelet_text(leader_wait(env)) + " ".join(words)))


def leader_wait(env: GangEnv, retry_s: int = LEADER_RETRY_S, wait_s: int = LEADER_WAIT_S) -> str:
    """POSIX sh that sets LEADER_IP once the leader's name resolves, trying every `retry_s` seconds; after
    `wait_s` seconds it exits 1 saying what it waited for and how long (shell text, before the kubelet's)."""
    tries = max(1, wait_s // retry_s)
    name = "$" + env.leader_address
    return (f'n=0; until LEADER_IP=$(getent hosts "{name}" | awk \'{{print $1}}\' | head -n 1); '
            f'[ -n "$LEADER_IP" ]; do n=$((n + 1)); '
            f'if [ "$n" -ge {tries} ]; then echo "cannot resolve the leader {name} ({env.leader_address}): gave up '
            f'after {tries} tries {retry_s} s apart (about {tries * retry_s} s); is the leader pod running and '
            f'its headless Service published?" >&2; exit 1; fi; '
            f'echo "waiting for the leader {name} to resolve (try $n of {tries})" >&2; sleep {retry_s}; done; exec ')
