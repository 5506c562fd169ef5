"""Upstream vllm-ascend launch derivation (pure): from DP groups to every `vllm serve` — its ranks, device slice,
data-parallel flags, KV connector config, per-host network env — and the proxy's ordered lists.

What the vllm-ascend tutorials make people compute by hand per node, as functions of plain data (the contract's
section "Upstream vllm-ascend"). Group indexes count across the deployment (prefill groups, then decode groups,
or the mixed groups), so default ports and engine ids never collide between roles on one host."""

from __future__ import annotations

import json
from typing import Callable, Mapping, Optional, Sequence

from deployctl.spec.dp_groups import DpGroup, Server

MOONCAKE = "MooncakeConnectorV1"
MOONCAKE_MODULE = "vllm_ascend.distributed.mooncake_connector"
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")


def data_parallel_args(server: Server, address_of: Mapping[str, str]) -> tuple[str, ...]:
    """The DP and TP flags of one server (`--data-parallel-rank` for an external rank, start rank and local size
    for an internal server; the group's first host is the DP master)."""
    group = server.group
    args = ["--tensor-parallel-size", str(group.tp), "--data-parallel-size", str(group.dp)]
    if server.external:
        args += ["--data-parallel-rank", str(server.ranks[0].rank)]
    else:
        args += ["--data-parallel-size-local", str(len(server.ranks)),
                 "--data-parallel-start-rank", str(server.ranks[0].rank)]
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
                       connector: str = MOONCAKE) -> dict:
    """The `--kv-transfer-config` document of a P/D server: its role, port and engine id (one per group), and
    the prefill and decode sizes every instance of the deployment must agree on."""
    return {
        "kv_connector": connector,
        "kv_connector_module_path": MOONCAKE_MODULE,
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


def visible_devices(server: Server) -> dict[str, str]:
    return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, server.devices))}


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
