"""Upstream vllm-ascend launch derivation (pure): from DP groups to every `vllm serve` — its ranks, device slice,
data-parallel flags, KV connector config, per-host network env — and the proxy's ordered lists.

What the vllm-ascend tutorials make people compute by hand per node, as functions of plain data (the contract's
section "Upstream vllm-ascend"). Group indexes count across the deployment (prefill groups, then decode groups,
or the mixed groups), so default ports and engine ids never collide between roles on one host."""

from __future__ import annotations

import json
import shlex
from typing import Callable, Mapping, Optional, Sequence

from deployctl.servers.vllm_ascend.groups import DpGroup, Server
from deployctl.spec.profiles import ServerProfile

MOONCAKE = "MooncakeConnectorV1"
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
# The image's set-up scripts expect bash (they are sourced from ~/.bashrc and by upstream's launcher); an image
# without bash (the test bed's stand-in) gets sh.
LAUNCH_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0" "$@"; fi; exec sh -c "$0" "$@"'


def data_parallel_args(server: Server, address_of: Mapping[str, str]) -> tuple[str, ...]:
    """The DP and TP flags of one server (`--data-parallel-rank` for an external rank; the local size for an
    internal server, and the start rank on its headless ones only; the group's first host is the DP master).

    The head never gets `--data-parallel-start-rank`: from vLLM 0.28 a start rank on a non-headless server selects
    hybrid load balancing, whose rank 0 refuses headless engines (vllm/entrypoints/cli/serve.py,
    `is_hybrid_lb = ... data_parallel_start_rank is not None`); upstream's tutorials write it only on the headless
    node, node 0 starting at rank 0 by default (vllm-ascend HEAD:docs/source/tutorials/models/DeepSeek-R1.md:
    299-326)."""
    group = server.group
    args = ["--tensor-parallel-size", str(group.tp), "--data-parallel-size", str(group.dp)]
    if server.external:
        args += ["--data-parallel-rank", str(server.ranks[0].rank)]
    else:
        args += ["--data-parallel-size-local", str(len(server.ranks))]
        if server.headless:
            args += ["--data-parallel-start-rank", str(server.ranks[0].rank)]
    args += ["--data-parallel-address", address_of[group.hosts[0]],
             "--data-parallel-rpc-port", str(group.data_parallel_rpc_port)]
    if group.expert_parallel:
        args.append("--enable-expert-parallel")
    if server.headless:
        args.append("--headless")
    else:
        args += ["--port", str(server.port)]
    return tuple(args)


def kv_transfer_config(server: Server, deployment: str, prefill: DpGroup, decode: DpGroup,
                       connector: str = MOONCAKE, module_path: Optional[str] = None) -> dict:
    """The `--kv-transfer-config` document of a P/D server: its role, port and engine id (one per group), and
    the prefill and decode sizes every instance of the deployment must agree on.

    `kv_connector_module_path` only where the profile needs one: vllm-ascend registers MooncakeConnectorV1 with
    vLLM's connector registry in every release line (vllm_ascend/distributed/kv_transfer/__init__.py:30), and a
    current vLLM imports the module path before its registry (vLLM #38301): the old path, moved by vllm-ascend
    #5719, then fails every P/D server at start. Current tutorials omit the key."""
    return {
        "kv_connector": connector,
        **({"kv_connector_module_path": module_path} if module_path else {}),
        "kv_role": KV_ROLE[server.group.role],
        "kv_port": str(server.kv_port),
        "engine_id": f"{deployment}-{server.group.label}",
        "kv_connector_extra_config": {
            "prefill": {"dp_size": prefill.dp, "tp_size": prefill.tp},
            "decode": {"dp_size": decode.dp, "tp_size": decode.tp},
        },
    }


def kv_transfer_arg(config: dict) -> tuple[str, str]:
    """The flag and its one JSON word (compact, key order kept: the digest of a container stays stable)."""
    return "--kv-transfer-config", json.dumps(config, separators=(",", ":"))


def host_env(address: str, interface: str) -> dict[str, str]:
    """What each host's tutorial has people type: its IP for HCCL, and the NIC carrying it for every socket."""
    return {"HCCL_IF_IP": address, **{name: interface for name in SOCKET_IFNAME_VARS}}


def launch_command(profile: ServerProfile, argv: Sequence[str], preload: Sequence[str] = ()) -> tuple[str, ...]:
    """`argv` (`vllm serve ...`) started as upstream's own launcher starts it, through the image's entrypoint: the
    image's set_env.sh scripts sourced where present, the profile's library paths (Mooncake's among them) put
    before LD_LIBRARY_PATH, the image's LD_PRELOAD (jemalloc: `preload`, the first path that exists), then exec
    (vllm-ascend HEAD:tests/e2e/nightly/multi_node/scripts/run.sh:26-57). The images append these to ~/.bashrc
    (v0.18.0:Dockerfile.a3:98-99), which no non-interactive shell reads (vllm-ascend #12059), and `--entrypoint
    vllm` skipped them: `ascend_transport.so` not found (#6949); Mooncake aborted without jemalloc (#5609). The
    scripts are sourced inside a function so that they never see, or shift, the server's arguments."""
    scripts = " ".join(shlex.quote(path) for path in profile.set_env)
    prelude = f'setup() {{ for f in {scripts}; do if [ -f "$f" ]; then . "$f"; fi; done; }}; setup; ' if scripts else ""
    if profile.library_path:
        paths = ":".join(profile.library_path)
        prelude += f'export LD_LIBRARY_PATH={shlex.quote(paths)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"; '
    if preload:
        # one image is Ubuntu (/usr/lib/<arch>-linux-gnu) or openEuler (/usr/lib64): the path that exists is its own
        candidates = " ".join(shlex.quote(path) for path in preload)
        prelude += (f'for f in {candidates}; do if [ -f "$f" ]; then '
                    f'export LD_PRELOAD="$f${{LD_PRELOAD:+:$LD_PRELOAD}}"; break; fi; done; ')
    return ("sh", "-c", LAUNCH_SHELL, prelude + 'exec "$0" "$@"', *argv)


def profile_flags(profile: ServerProfile, role: str, given: Sequence[str]) -> tuple[str, ...]:
    """The profile's default flags for a role that the user did not set (`given`: the flags already rendered
    and written): each default is a flag with its value word, if any."""
    defaults, i = [], 0
    words = list(profile.flags_for(role))
    while i < len(words):
        flag = words[i]
        value = words[i + 1:i + 2] if i + 1 < len(words) and not words[i + 1].startswith("-") else []
        i += 1 + len(value)
        if not _overridden(flag, given):
            defaults += [flag, *value]
    return tuple(defaults)


# a default stands unless the user wrote the same setting (either polarity, or what replaces it)
_SAME_SETTING = {
    "--no-enable-prefix-caching": ("--enable-prefix-caching", "--no-enable-prefix-caching"),
    "--compilation-config": ("--compilation-config", "-cc", "-O", "--enforce-eager"),
}


def _overridden(flag: str, given: Sequence[str]) -> bool:
    names = {word.split("=", 1)[0] for word in given if word.startswith("-")}
    names |= {word[:2] for word in given if word.startswith("-O")}  # -O3, -O.cudagraph_mode=...
    return any(name in names for name in _SAME_SETTING.get(flag, (flag,)))


def proxy_args(servers: Sequence[Server], address_of: Mapping[str, str],
               address: Optional[Callable[[Server], str]] = None) -> tuple[str, ...]:
    """The proxy's `--prefiller-hosts/-ports` and `--decoder-hosts/-ports`: every API server of each role, in
    group, host and rank order (headless servers serve no API). `address` names a server where its host's
    address does not (a Kubernetes export: each server's pod or Service)."""
    address = address or (lambda server: address_of[server.host])
    args: list[str] = []
    for role, flag in (("prefill", "prefiller"), ("decode", "decoder")):
        serving = [s for s in servers if s.group.role == role and not s.headless]
        args += [f"--{flag}-hosts", *(address(s) for s in serving),
                 f"--{flag}-ports", *(str(s.port) for s in serving)]
    return tuple(args)
