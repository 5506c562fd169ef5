"""The topology a `server: vllm-ascend` spec builds (pure): its DP groups from the document, and one Instance per
`vllm serve` of each (per host and group, or per rank), each with the ports and unit its server gives it."""

from __future__ import annotations

import json
from typing import Mapping, Optional

from deployctl.servers.vllm_ascend.groups import UpstreamTopology, dp_group, servers_of, with_server
from deployctl.servers.vllm_ascend.rules_groups import GROUP_KEYS
from deployctl.spec.model import Instance, ModelArgs
from deployctl.spec.values import env_vars, quantity


def build_topology(data: Mapping, model: ModelArgs, cards: int,
                   references: Mapping) -> tuple[tuple[Instance, ...], UpstreamTopology]:
    """Its servers' instances (the proxy is the front's) and its groups, from a valid document."""
    topology, container = data["topology"], data.get("container", {})
    upstream = _upstream(topology, cards)
    return _upstream_instances(data["name"], topology, upstream, model, cards, references,
                               container.get("shm_size"), container), upstream


def _group_entries(topology: dict) -> list[tuple[str, dict, tuple]]:
    """(role, entry, path) of every DP group, prefill before decode: their order is their index."""
    keys = GROUP_KEYS[topology["mode"]]
    return [("mixed" if key == "groups" else key, entry, ("topology", key, i))
            for key in keys for i, entry in enumerate(topology.get(key, ()))]


def _upstream(topology: dict, cards: int) -> UpstreamTopology:
    """The groups; a default kv_port assumes requirements.cards NPUs per host (`up` reads the hosts' own count)."""
    groups = tuple(
        dp_group(role, index, entry["hosts"], entry["dp"], entry["tp"], entry["port"], cards,
                 expert_parallel=entry.get("expert_parallel", False),
                 devices=tuple(entry["devices"]) if "devices" in entry else None,
                 kv_port=entry.get("kv_port"), rpc_port=entry.get("rpc_port"), number=path[2])
        for index, (role, entry, path) in enumerate(_group_entries(topology)))
    return UpstreamTopology(dp_launch=topology.get("dp_launch", "internal"), groups=groups,
                            connector=topology.get("connector"))


def _upstream_instances(deployment: str, topology: dict, upstream: UpstreamTopology, model: ModelArgs,
                        cards: int, references: Mapping, shm_size: Optional[str] = None,
                        container: Optional[dict] = None) -> tuple[Instance, ...]:
    """One instance per `vllm serve` (per host and group, or per rank)."""
    out: list[Instance] = []
    for group, (role, entry, path) in zip(upstream.groups, _group_entries(topology)):
        own = entry.get("model", {})
        env = env_vars(entry.get("env", {}), references, path + ("env",))
        json_args = tuple((flag, json.dumps(own[key], sort_keys=True, separators=(",", ":")))
                          for key, flag in (("additional_config", "--additional-config"),
                                            ("compilation_config", "--compilation-config")) if key in own)
        if "speculative" in entry:  # vLLM's --speculative-config: method, num_speculative_tokens, model, enforce_eager
            json_args += (("--speculative-config", json.dumps(entry["speculative"], sort_keys=True,
                                                              separators=(",", ":"))),)
        group_shm = entry.get("container", {}).get("shm_size", shm_size)
        own_container = {**(container or {}), **entry.get("container", {})}  # the group's over the top level's
        for server in servers_of(group, cards, upstream.dp_launch):
            out.append(with_server(Instance(
                role=role, index=sum(1 for i in out if i.role == role), host=server.host, devices=server.devices,
                port=server.port, name=f"{deployment}-{server.name}", tp=group.tp,
                max_num_seqs=own.get("max_num_seqs", model.max_num_seqs),
                max_num_batched_tokens=own.get("max_num_batched_tokens", model.max_num_batched_tokens),
                extra_args=model.extra_args + tuple(own.get("extra_args", ())), path=path,
                env=env, json_args=json_args, shm_size=group_shm,
                cpu=quantity(own_container.get("cpu")), memory=own_container.get("memory"),
            ), server))
    return tuple(out)

