"""What the plan needs to know about each host, as probes: one batch, one round trip per host (pure)."""

from __future__ import annotations

from typing import Optional

from deployctl.errors import HostError, RanktableError
from deployctl.facts.deployed import deployed_probe
from deployctl.facts.files import HCCN_CONF
from deployctl.facts.image_state import image_probe
from deployctl.facts.model import HostFacts
from deployctl.facts.hccn_tool import device_ip_probes
from deployctl.facts.probe import Probe
from deployctl.facts.weights_state import weights_probe
from deployctl.plan.containers import env_dir, ranktable_dir
from deployctl.servers import flavour_of
from deployctl.spec.model import Instance, Spec

WEIGHTS_STATE_KEY = "weights"
HANG_AFTER_S = 15  # a one-token generate on an idle server takes milliseconds; longer than this is a hang


def health_path(spec: Spec, instance: Optional[Instance] = None) -> str:
    """What answers 200 once an instance serves, as its server flavour says: vLLM's /health; Triton's readiness;
    the vllm-ascend proxy's /healthcheck. `up` waits on it and `status` reads it."""
    from deployctl.fronts import front_for_role

    front = front_for_role(instance.role) if instance is not None else None
    own = front.health_path() if front is not None else None
    return own if own is not None else flavour_of(spec).health_path(instance)


def fetcher_path(spec: Spec) -> str:
    """Where the host-side weights fetcher lives between syncs."""
    return f"{spec.remote_state_dir}/weights_fetch.py"


def host_devices(spec: Spec, host: str) -> tuple[int, ...]:
    return tuple(sorted({d for i in spec.instances if i.host == host for d in i.devices}))


def deployed_dirs(spec: Spec) -> tuple[str, ...]:
    """The directories whose files deployctl writes (ranktables, env files, Triton's model repository)."""
    return (ranktable_dir(spec), env_dir(spec)) + flavour_of(spec).deployed_dirs(spec)


def deployment_files(spec: Spec) -> tuple[str, ...]:
    """What `up` and `weights sync` write for a deployment on a host, beside the history and the lock: the env
    files of secrets, the ranktables, Triton's model repository and the weights fetcher. `down` removes them."""
    from deployctl.servers.triton.repository import repository_dir

    return (env_dir(spec), ranktable_dir(spec), repository_dir(spec), fetcher_path(spec))


def state_probes(spec: Spec, host: str, *, skip: frozenset[str] = frozenset(),
                 stages: frozenset[str] = frozenset({"image", "weights", "ranktables", "containers"}),
                 hang_after: float = HANG_AFTER_S) -> tuple[Probe, ...]:
    """Every probe the plan of `stages` reads on `host`: what runs, the image, the weights, the device IPs."""
    used = {h.name for h in spec.used_hosts}
    health = tuple((i.port, health_path(spec, i)) for i in spec.api_servers if i.host == host)
    probes = []
    if "containers" in stages:
        probes.append(deployed_probe(spec.image.name or "", deployed_dirs(spec), health))
        if host in used:  # what the flavour's containers read of each host (servers/base.py host_probes)
            probes += flavour_of(spec).host_probes(spec)
    # what `up` starts listens on ports free and reserved from the ephemeral range (status starts nothing)
    if "containers" in stages and "liveness" not in stages and host in used:
        from deployctl.facts.listening import listening_probe

        probes.append(listening_probe())
        if flavour_of(spec).surge(spec):  # a surge needs its free cards too
            from deployctl.facts.host_layout import layout_probe

            cards = layout_probe()
            probes += [cards] if cards.key not in {p.key for p in probes} else []
    if "containers" in stages and spec.front is not None and spec.front.host == host:
        from deployctl.plan.front import front_list_probe, front_of

        front = front_of(spec)
        if front is not None and front.changes_list:  # what it routes to now: `up` puts it the spec's list
            probes.append(front_list_probe(front))
    if "containers" in stages and spec.cache.compile:  # which compile caches it holds whole (any host may give one)
        from deployctl.facts.compile_cache import cache_probe

        probes.append(cache_probe(spec.cache.dir))
    if "files" in stages:
        from deployctl.facts.deployed import existing_paths_probe

        probes.append(existing_paths_probe(deployment_files(spec)))
    asked = flavour_of(spec).liveness_request(spec) if "liveness" in stages and health else None
    if asked is not None:
        from deployctl.facts.liveness import liveness_probe

        path, body = asked
        probes.append(liveness_probe(tuple((port, path) for port, _ in health), body, hang_after))
    if "ranktables" in stages and flavour_of(spec).uses_ranktables(spec) and host in used:
        devices = host_devices(spec, host)
        if devices:
            probes.extend(device_ip_probes(devices))
        if spec.host(host).is_local:
            from deployctl.ranktable.host_address import addresses_probe

            probes.append(addresses_probe())
    # even with the image stage skipped: a built image's inputs label is its identity in container digests
    if "image" in stages and spec.image.build and host in used:
        probes.append(image_probe(spec.image.name or "", spec.image.build.base, spec.platform))
    if "weights" in stages and "weights" not in skip and spec.weights.dest and host in used:
        probes.append(weights_probe(spec.weights.dest, fetcher_path(spec)))
    return tuple(probes)


def device_ip_of(facts: HostFacts, host: str, device: int) -> str:
    """An NPU's RoCE address: the tool's answer, else /etc/hccn.conf; a RanktableError naming both otherwise."""
    from deployctl.ranktable.device_ips import ToolAnswer, resolve_device_ip

    live = facts.hccn_device(device)
    if live is not None and live.ip is not None:
        return live.ip.ipaddr
    missing = "hccn_tool" in facts.missing_tools
    error = facts.probe_error("hccn_ip")
    answer = ToolAnswer(None if missing else "", 1 if error else 0, error or "")
    return resolve_device_ip(device, answer, facts.hccn_conf, HCCN_CONF, where=host)


def local_server_ip(facts: HostFacts, host: str) -> str:
    """A `local` host's address for ranktables: its default route's interface's, else its first global one."""
    if facts.bound_addresses is None:
        why = facts.probe_error("bound_addresses") or ("the ip tool is not installed" if "ip" in facts.missing_tools
                                                      else "no answer")
        raise HostError(host, f"cannot tell this host's address: {why}",
                        hint="write the host's address in the spec instead of `local`")
    try:
        return facts.bound_addresses.choose()
    except RanktableError as error:
        raise HostError(host, error.message, hint="write the host's address in the spec instead of `local`") from None


