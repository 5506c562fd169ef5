"""vllm-ascend (`server: vllm-ascend`, platform ascend): upstream `vllm serve` per DP group with exactly its NPUs,
Mooncake's KV connector and the load-balance proxy for P/D, rendered per the image's server profile (pure). The
derivations live in this package (groups.py, topology.py, ports.py, rules_*.py, dp_launch.py, upstream.py); this
module is what the rest of deployctl asks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Sequence

from deployctl.servers.ascendcloud import FAMILY, MOE
from deployctl.servers.base import Flavour
from deployctl.servers.fields import POSITIONAL, VERBATIM, Flag, Refused
from deployctl.servers.metrics import VLLM_KV_CONNECTOR
from deployctl.servers.shutdown import ROW as SHUTDOWN_TIMEOUT

if TYPE_CHECKING:
    from deployctl.errors import Problem
    from deployctl.export.gang_types import Gang
    from deployctl.export.stacks import NpuStack
    from deployctl.facts.model import HostFacts
    from deployctl.facts.probe import Probe
    from deployctl.plan.container_types import Container, RanktableFiles
    from deployctl.servers.vllm_ascend.groups import UpstreamTopology
    from deployctl.spec.model import Instance, ModelArgs, Spec
    from deployctl.spec.port_uses import PortUse
    from deployctl.spec.rules import Context

# vLLM's --kv-cache-dtype has no int8 (CacheDType: auto or an fp8 kind), and vllm-ascend reads an int8 KV cache
# (C8) from the weights' own quantization description (quant_model_description.json), not from a flag.
NO_INT8_KV = Refused("kv_cache_dtype", "kv_cache_dtype int8 never reaches vllm-ascend: vLLM's --kv-cache-dtype takes "
                                       "auto or an fp8 kind (vllm/config/cache.py CacheDType); vllm-ascend quantizes "
                                       "the KV cache (C8) from the weights' quant_model_description.json",
                     hint="remove kv_cache_dtype: use weights quantized with their KV cache and quantization: ascend")
NO_SCALES = Refused("quantization_param_path", "quantization_param_path is AscendCloud vLLM's scales file for an "
                                               "int8 KV cache; vllm-ascend reads the scales from the quantized "
                                               "weights", hint="remove it")

# The proxy's own /healthcheck answers {"status": "ok"} whatever its prefillers and decoders do
# (examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py, ProxyState.healthcheck), so a
# Kubernetes proxy would be Ready, and get traffic, before any of them serves. Its readiness asks each one's
# /health instead, with the interpreter the proxy runs on (the image's python3; its standard library only).
PROXY_READINESS = (
    "import sys, urllib.request\n"
    "for url in sys.argv[1:]:\n"
    "    try:\n"
    "        urllib.request.urlopen(url, timeout=2).close()\n"
    "    except Exception as error:\n"
    "        sys.exit(f'not ready: {url}: {error}')\n"
)
BACKEND_FLAGS = (("--prefiller-hosts", "--prefiller-ports"), ("--decoder-hosts", "--decoder-ports"))
# The AscendCloud keys people carry over (unknown to its schema), and the key of its own that says it now.
CARRIED_KEYS = {
    "scheduler": "the public endpoint is the proxy: topology.proxy: {host: ..., port: 8000}",
    "instances": "mode mixed lists DP groups: topology.groups: [{hosts: [...], dp: ..., tp: ..., port: ...}]",
    "host": "a group lists its hosts: hosts: [node1, ...]; its dp ranks are spread evenly over them",
}


def proxy_backends(command: tuple[str, ...]) -> list[str]:
    """Each server's /health URL, from the proxy's own --prefiller-/--decoder- hosts and ports."""
    def values(flag: str) -> list[str]:
        start = command.index(flag) + 1
        end = next((i for i in range(start, len(command)) if command[i].startswith("--")), len(command))
        return list(command[start:end])

    return [f"http://{host}:{port}/health" for hosts, ports in BACKEND_FLAGS
            for host, port in zip(values(hosts), values(ports))]


# `vllm serve MODEL ...` in the order vllm-ascend's tutorials write it: the model's arguments, the DP and TP flags,
# the connector, the pass-through JSON, the profile's default flags for the role, the extra args.
TABLE = (
    Flag("@model", POSITIONAL),
    Flag("served_name", "--served-model-name"),
    Flag("@host", "--host"),
    Flag("max_model_len", "--max-model-len"),
    Flag("max_num_seqs", "--max-num-seqs"),
    Flag("max_num_batched_tokens", "--max-num-batched-tokens"),
    Flag("quantization", "--quantization"),
    NO_INT8_KV,
    NO_SCALES,
    Flag("@data_parallel", VERBATIM),
    Flag("@kv_transfer", VERBATIM),
    Flag("additional_config", "--additional-config"),
    Flag("compilation_config", "--compilation-config"),
    Flag("@speculative", "--speculative-config"),
    Flag("@profile_flags", VERBATIM),  # where the user set none of them (a callable of the words so far)
    SHUTDOWN_TIMEOUT,  # where the profile's vLLM has it (shutdown_timeout_from)
    Flag("extra_args", VERBATIM),
    FAMILY,
    MOE,
)


class VllmAscend(Flavour):
    platform, server, title = "ascend", "vllm-ascend", "vllm-ascend"
    table = TABLE
    wrong_platform_hint = "use server: vllm on GPU hosts"
    dp_groups = True
    topology_keys = {}  # DP groups: its own rules (servers/vllm_ascend/rules_groups.py)
    metrics = VLLM_KV_CONNECTOR  # its P/D runs vLLM's scheduler with a KV connector (Mooncake)

    def document_units(self, c: "Context"):
        return [], list(c.group_units()), None

    def topology_front(self, mode: Optional[str]) -> Optional[str]:
        """Its P/D proxy (`topology.proxy`, or `topology.front` with kind proxy)."""
        return "proxy" if mode == "disaggregated" else None

    def doctor_checks(self, spec: "Spec") -> frozenset[str]:
        """vm.swappiness, kernel.numa_balancing, the CPU governor, as its tutorials set them."""
        return frozenset({"tuning"})

    def check(self, c: "Context") -> Iterator["Problem"]:
        from deployctl.servers.vllm_ascend.rules_profile import check_pd_traps, check_profile
        from deployctl.servers.vllm_ascend.rules_groups import check_upstream

        yield from check_upstream(c)
        yield from check_profile(c)
        yield from check_pd_traps(c)

    def build_topology(self, data: Mapping, model: "ModelArgs", cards: int,
                       references: Mapping) -> tuple[tuple["Instance", ...], "UpstreamTopology"]:
        """Its DP groups, and an instance per `vllm serve` of each."""
        from deployctl.servers.vllm_ascend.topology import build_topology

        return build_topology(data, model, cards, references)

    def document_ports(self, c: "Context") -> list["PortUse"]:
        from deployctl.servers.vllm_ascend.ports import document_ports

        return document_ports(c)

    def spec_ports(self, spec: "Spec") -> Optional[list["PortUse"]]:
        from deployctl.servers.vllm_ascend.ports import spec_ports

        return spec_ports(spec) if spec.upstream is not None else None

    def card_counts(self, c: "Context") -> Iterator[tuple[tuple, int, str]]:
        from deployctl.servers.vllm_ascend.rules_groups import card_counts

        return card_counts(c)

    def carried_key(self, key: str, known: Sequence[str]) -> Optional[tuple[str, str]]:
        """The AscendCloud keys people carry over, where its topology (dp_launch) or a group (dp) has them."""
        hint = CARRIED_KEYS.get(key) if "dp_launch" in known or "dp" in known else None
        if hint is None:
            return None
        return f"'{key}' is an AscendCloud key (server vllm); server {self.server} has no {key}", hint

    def container(self, spec: "Spec", instance: "Instance", ranktables: Optional["RanktableFiles"],
                  networks: Optional[Mapping]) -> "Container":
        from deployctl.servers.vllm_ascend.upstream import upstream_container

        return upstream_container(spec, instance, networks)

    def host_probes(self, spec: "Spec") -> tuple["Probe", ...]:
        """Each host's NIC (HCCL_IF_IP, *_SOCKET_IFNAME), its NPU count (the default kv_port) and /usr/local/dcmi
        (mounted where present), and the version its image was built with (it picks the server profile)."""
        from deployctl.facts.host_layout import layout_probe
        from deployctl.facts.image_version import image_version_probe

        probes = self.network_probes(spec) + (layout_probe(),)
        return probes + ((image_version_probe(spec.image.name),) if spec.image.name else ())

    def network_probes(self, spec: "Spec") -> tuple["Probe", ...]:
        from deployctl.ranktable.host_address import addresses_probe

        return (addresses_probe(),)

    def host_networks(self, spec: "Spec", facts: Mapping[str, "HostFacts"]) -> Optional[Mapping]:
        from deployctl.servers.vllm_ascend.upstream import host_networks

        return host_networks(spec, facts)

    def with_host_facts(self, spec: "Spec", networks: Optional[Mapping], facts: Mapping[str, "HostFacts"]) -> "Spec":
        """Default kv ports for the hosts' own NPU counts; the version the image names."""
        from deployctl.servers.vllm_ascend.upstream import with_host_facts

        probed = next((facts[h.name].image_version for h in spec.used_hosts
                       if h.name in facts and facts[h.name].image_version), None)
        return with_host_facts(spec, networks, probed)

    def startup(self, spec: "Spec"):
        """Its release line's log lines and graph caches (server_profiles.json)."""
        if spec.profile is not None and spec.profile.profile.startup is not None:
            return spec.profile.profile.startup
        return super().startup(spec)

    def readiness_command(self, instance: "Instance", command: tuple[str, ...]) -> Optional[tuple[str, ...]]:
        if instance.role != "proxy":
            return None
        return ("python3", "-c", PROXY_READINESS, *proxy_backends(command))

    def export_spec(self, spec: "Spec", stack: "NpuStack") -> "Spec":
        """A host's ranks as one server where the stack gives a pod's NPUs to one container."""
        from deployctl.servers.vllm_ascend.whole_nodes import one_container_per_pod

        return one_container_per_pod(spec, stack)

    def export_gangs(self, spec: "Spec") -> tuple["Gang", ...]:
        """A gang per DP group."""
        if spec.upstream is None:
            return super().export_gangs(spec)
        from deployctl.servers.vllm_ascend.export import dp_gangs

        return dp_gangs(spec)

    def worker_values(self, instance: "Instance", leader: str, index: str) -> Mapping[str, str]:
        from deployctl.servers.vllm_ascend.export import worker_values

        return worker_values(instance, leader, index)

    def gang_refusal(self, spec: "Spec", target: str) -> Optional[tuple[str, str]]:
        from deployctl.servers.vllm_ascend.export import gang_refusal

        return gang_refusal(spec, target)

    def cluster_proxy_command(self, spec: "Spec", proxy: "Instance", networks: Mapping,
                              address: Callable[["Instance"], str]) -> Optional[tuple[str, ...]]:
        from deployctl.servers.vllm_ascend.export import cluster_proxy_command

        return cluster_proxy_command(spec, proxy, networks, address)

    def health_path(self, instance: Optional["Instance"] = None) -> str:
        if instance is not None and instance.role == "proxy":
            from deployctl.servers.vllm_ascend.upstream import PROXY_HEALTH_PATH

            return PROXY_HEALTH_PATH
        return "/health"

    def unit_noun(self, spec: "Spec") -> str:
        return "group" if spec.upstream else "instance"

    def members_change_refusal(self, spec: "Spec") -> str:
        if spec.upstream is None:
            return ""
        return ("a DP group changes its ranks (some start or stop for good): the ranks of one group stop and "
                "start together")

    def surge_unit(self, spec: "Spec", members: tuple["Instance", ...], surged: int, free: dict[str, list[int]],
                   taken: dict[str, set[int]]) -> Optional[tuple["Instance", ...]]:
        """A DP group surges whole as a new group, numbered after the spec's groups and the surges before it."""
        if members[0].server is None:
            return super().surge_unit(spec, members, surged, free, taken)
        from deployctl.servers.vllm_ascend.surge import group_surge

        return group_surge(members, len(spec.upstream.groups) + surged, spec.upstream.dp_launch, free, taken)

    def cache_layout(self, instance: "Instance") -> Mapping[str, object]:
        """A DP server's group's dp and expert parallel."""
        server = instance.server
        if server is None:
            return super().cache_layout(instance)
        return {"dp": server.group.dp, "expert_parallel": bool(server.group.expert_parallel)}

    def monitor_labels(self, instance: "Instance") -> Mapping[str, str]:
        """A DP server's group as the spec numbers it and its first DP rank (an internal launch's head fronts ranks
        start..start+local-1; vLLM labels each engine `engine`)."""
        server = instance.server
        if server is None:
            return super().monitor_labels(instance)
        number = server.group.number if server.group.number is not None else server.group.index
        return {"group": str(number), "rank": str(server.ranks[0].rank) if server.ranks else "0"}

    def summary_columns(self, spec: "Spec") -> tuple[str, ...]:
        return ("DP ranks",) if spec.upstream else ()

    def summary_cells(self, instance: "Instance") -> Mapping[str, str]:
        """`2-3 of 8`: the DP ranks one server runs."""
        if instance.server is None:
            return {}
        ranks = [r.rank for r in instance.server.ranks]
        shown = str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
        return {"DP ranks": f"{shown} of {instance.server.group.dp}"}

    def summary_fields(self, instance: "Instance") -> Mapping[str, object]:
        return {"dp_ranks": [r.rank for r in instance.server.ranks]} if instance.server else {}
