"""The containers of a `server: vllm-ascend` deployment (pure): one per `vllm serve` with exactly its devices,
the mounts vllm-ascend documents, each host's network env, its DP flags and KV connector config; then the proxy
with its ordered lists. The derivation of each value lives in dp_launch.py; this module assembles them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

from deployctl.errors import PlanError
from deployctl.facts.hccn_tool import HCCN_TOOL_PATH
from deployctl.facts.host_layout import DCMI
from deployctl.facts.model import HostFacts
from deployctl.servers.vllm_ascend.dp_launch import (
    data_parallel_args, host_env, kv_transfer_arg, kv_transfer_config, launch_command, profile_flags, proxy_args,
)
from deployctl.servers.engine_ready import engine_ready_env
from deployctl.servers.fields import model_values, render_flags
from deployctl.servers.shutdown import shutdown_timeout
from deployctl.servers.vllm_ascend import TABLE as VLLM_ASCEND_TABLE
from deployctl.servers.vllm_ascend.groups import Server, default_kv_port, with_server
from deployctl.spec.model import EnvVar, Instance, Spec
from deployctl.spec.profiles import ServerProfile, select_profile

# vllm-ascend's images carry the repository here; its P/D proxy is an example script of that repository.
PROXY_SCRIPT = "/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
PROXY_HEALTH_PATH = "/healthcheck"  # the proxy answers this, not /health
VLLM_SERVE = ("vllm", "serve")


@dataclass(frozen=True)
class HostNetwork:
    """A host's address for HCCL and the DP master, and the network interface that carries it; with what else
    its containers are given from the host: its NPU count (None: unknown) and whether it has /usr/local/dcmi."""

    address: str
    interface: str
    npus: Optional[int] = None
    dcmi: bool = False


def host_networks(spec: Spec, facts: Mapping[str, HostFacts]) -> dict[str, HostNetwork]:
    """Each serving host's address (the spec's, or the default route's for `local` and DNS names) and the NIC
    that holds it, from `ip -4 -o addr show`: never typed by the user."""
    networks = {}
    for host in spec.used_hosts:
        found = facts[host.name].bound_addresses
        if found is None:
            why = facts[host.name].probe_error("bound_addresses") or "no answer from `ip -4 -o addr show`"
            raise PlanError(f"{host.name}: cannot tell which network interface carries its address: {why}",
                            hint="vllm-ascend needs the NIC name for GLOO/TP/HCCL_SOCKET_IFNAME; install iproute2")
        bound = {a.address: a.interface for a in found.addresses}
        address = host.address if host.address in bound else found.choose()
        if not host.is_local and _is_ipv4(host.address) and host.address not in bound:
            listed = ", ".join(f"{a.interface} {a.address}" for a in found.addresses) or "none"
            raise PlanError(f"{host.label}: no network interface on the host carries {host.address} "
                            f"(its IPv4 addresses: {listed})",
                            hint="write the address the host itself holds: HCCL binds to it")
        layout = facts[host.name].layout
        networks[host.name] = HostNetwork(address, bound[address], len(layout.npus) if layout else None,
                                          bool(layout and layout.dcmi))
    return networks


def profile_of(spec: Spec) -> ServerProfile:
    """The server profile a vllm-ascend spec renders with (the loader chose it; else the newest)."""
    return choice_of(spec).profile


def choice_of(spec: Spec):
    """The profile choice of a vllm-ascend spec, with the version it read (the loader made it; else now)."""
    return spec.profile or select_profile(spec.server_version, spec.image.name)


def with_host_facts(spec: Spec, networks: Mapping[str, HostNetwork], probed: Optional[str] = None) -> Spec:
    """The spec as the hosts make it: each group's default kv_port for the NPUs its hosts have (validate assumed
    requirements.cards), and the profile of the version probed in the image (server_version still wins)."""
    if probed and spec.upstream is not None:
        spec = replace(spec, profile=select_profile(spec.server_version, spec.image.name, probed))
    changed = {}
    for group in spec.upstream.groups if spec.upstream else ():
        counts = [networks[h].npus for h in group.hosts if h in networks and networks[h].npus]
        if counts and group.kv_port is None and default_kv_port(max(counts)) != group.kv_port_default:
            changed[group.index] = replace(group, kv_port_default=default_kv_port(max(counts)))
    if not changed:
        return spec
    instances = tuple(
        with_server(i, replace(i.server, group=changed[i.server.group.index]))
        if i.server is not None and i.server.group.index in changed else i for i in spec.instances)
    groups = tuple(changed.get(g.index, g) for g in spec.upstream.groups)
    return replace(spec, instances=instances, upstream=replace(spec.upstream, groups=groups))


def _is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)


def upstream_mounts(spec: Spec, network: Optional[HostNetwork] = None) -> tuple:
    """What vllm-ascend's docker run mounts: the driver, npu-smi, the install info, hccn.conf and hccn_tool,
    /usr/local/dcmi where the host has it (HEAD:docs/source/tutorials/features/
    pd_disaggregation_mooncake_multi_node.md:155), the weights. The driver directory holds lib64 and version.info."""
    from deployctl.plan.container_types import Mount

    mounts = [
        Mount("/usr/local/Ascend/driver", "/usr/local/Ascend/driver"),
        Mount("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi"),
        Mount("/etc/ascend_install.info", "/etc/ascend_install.info"),
        Mount("/etc/hccn.conf", "/etc/hccn.conf"),
        Mount(HCCN_TOOL_PATH, "/usr/local/bin/hccn_tool"),
    ]
    if network is not None and network.dcmi:
        mounts.append(Mount(DCMI, DCMI))
    if spec.weights.dest:
        mounts.append(Mount(spec.weights.dest, spec.weights.dest))
    return tuple(mounts)


def serve_command(spec: Spec, instance: Instance, networks: Mapping[str, HostNetwork]) -> tuple[str, ...]:
    """`vllm serve MODEL ...`, rendered from vllm-ascend's field table (servers/vllm_ascend/__init__.py): the model's
    arguments, the DP and TP flags, the connector, the pass-through JSON, the profile's default flags for the role
    (where the user set none of them), the extra args."""
    server, profile = instance.server, profile_of(spec)
    values = model_values(spec, instance)
    values["@data_parallel"] = data_parallel_args(server, {h: n.address for h, n in networks.items()})
    if spec.mode == "disaggregated":
        groups = spec.upstream.groups
        prefill = next(g for g in groups if g.role == "prefill")
        decode = next(g for g in groups if g.role == "decode")
        # the hybrid connector is registered by name alone (v0.20.2rc1:vllm_ascend/distributed/kv_transfer/
        # __init__.py:32-36); validate refused it on a release that lacks it (servers/vllm_ascend/rules_profile.py)
        hybrid = spec.upstream.connector == "mooncake_hybrid" and profile.hybrid_connector
        values["@kv_transfer"] = kv_transfer_arg(kv_transfer_config(
            server, spec.name, prefill, decode, hybrid or profile.kv_connector,
            None if hybrid else profile.kv_connector_module_path))
    values["@profile_flags"] = lambda so_far: profile_flags(profile, instance.role,
                                                            VLLM_SERVE + so_far + instance.extra_args)
    values["@shutdown_timeout"] = shutdown_timeout(choice_of(spec).has_shutdown_timeout, instance.extra_args)
    return VLLM_SERVE + render_flags(VLLM_ASCEND_TABLE, values)


def proxy_command(spec: Spec, proxy: Instance, networks: Mapping[str, HostNetwork],
                  address: Optional[Callable[[Server], str]] = None) -> tuple[str, ...]:
    """The proxy's command; `address` names each server where its host's address does not (Kubernetes)."""
    servers = [i.server for i in spec.instances if i.server is not None]
    return _proxy_head(proxy) + proxy_args(servers, {h: n.address for h, n in networks.items()}, address)


def _proxy_head(proxy: Instance) -> tuple[str, ...]:
    return ("python3", PROXY_SCRIPT, "--host", "0.0.0.0", "--port", str(proxy.port))


def upstream_env(instance: Instance, networks: Mapping[str, HostNetwork], profile: Optional[ServerProfile] = None,
                 spec_env: tuple[EnvVar, ...] = ()) -> tuple[EnvVar, ...]:
    """The host's network and the profile's defaults for the role, then the group's literal env (the group's and
    the spec's env override them; the group's secrets go through the env file, upstream_container). No
    ASCEND_RT_VISIBLE_DEVICES: the container mounts exactly its own NPUs, which the runtime numbers from 0
    (reports such as vllm-ascend #2238; PR #12959, closed unmerged, concerned A5 only)."""
    derived: dict[str, str] = {}
    if instance.server is not None:
        network = networks[instance.host]
        derived.update(host_env(network.address, network.interface))
        derived.update(profile.env_for(instance.role) if profile else {})
    own = {e.name for e in instance.env + spec_env}
    return (tuple(EnvVar(k, v, v) for k, v in derived.items() if k not in own)
            + tuple(e for e in instance.env if not e.is_secret))


def upstream_container(spec: Spec, instance: Instance, networks: Optional[Mapping[str, HostNetwork]]):
    """The container of one vllm-ascend server or of the proxy."""
    from deployctl.plan.container_types import (
        LABEL_DEPLOYMENT, LABEL_INSTANCE, LABEL_ROLE, MANAGER_DEVICES, Container, env_file_path,
    )

    networks = networks or {}
    own = {e.name for e in instance.env}
    # The group's env is on top of the spec's: a name both set is the group's, once, literal or secret alike.
    shared = tuple(e for e in spec.env if e.name not in own)
    literal = tuple(e for e in shared if not e.is_secret)
    secret = tuple(e for e in shared if e.is_secret) + tuple(e for e in instance.env if e.is_secret)
    proxy = instance.server is None
    profile = profile_of(spec)
    return Container(
        name=instance.name,
        instance=instance,
        image=spec.image.name or "",
        devices=() if proxy else tuple(f"/dev/davinci{d}" for d in instance.devices) + MANAGER_DEVICES,
        mounts=() if proxy else upstream_mounts(spec, networks.get(instance.host)),
        env=upstream_env(instance, networks, profile, spec.env)
        + (() if proxy else engine_ready_env(spec, instance.env)) + literal,
        env_file=env_file_path(spec, instance.name) if secret else None,
        secret_env=secret,
        labels=((LABEL_DEPLOYMENT, spec.name), (LABEL_ROLE, instance.role), (LABEL_INSTANCE, instance.name)),
        command=proxy_command(spec, instance, networks) if proxy
        else launch_command(profile, serve_command(spec, instance, networks), choice_of(spec).preload),
        shm_size=None if proxy else instance.shm_size or spec.shm_size or profile.shm_size,
        image_entrypoint=True,
        identity_command=proxy_identity(spec, instance) if proxy else None,
    )


def proxy_identity(spec: Spec, proxy: Instance) -> Optional[tuple[str, ...]]:
    """The proxy's command without its lists where it changes them while serving (plan/front.py): it cannot
    start without one prefiller and one decoder (`nargs="+"`, vllm-ascend v0.23.0:examples/
    disaggregated_prefill_v1/load_balance_proxy_server_example.py:646-649), so its argv keeps the spec's, but
    a changed list is put to it through /instances/add|remove instead of a new proxy."""
    from deployctl.plan.front import front_of

    front = front_of(spec)
    if front is None or not front.changes_list:
        return None
    return _proxy_head(proxy)
