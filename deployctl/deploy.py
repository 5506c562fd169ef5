"""The steps `plan`, `up`, `down` and `status` share: connect, gather, render ranktables, read health."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, Optional

from deployctl.gather import gather_deploy_facts, gather_device_ips, on_hosts, server_ip
from deployctl.plan.containers import LABEL_DEPLOYMENT, PREVIOUS_SUFFIX, RanktableFiles
from deployctl.plan.up import DeployFacts
from deployctl.spec.model import Spec
from deployctl.transport import Transport

def connect_options(args, ui=None):
    """The common connection flags (--accept-new-host-keys, --connect-timeout); waits announced through `ui`."""
    from deployctl.transport.connect import ConnectOptions

    return ConnectOptions.from_args(args, ui)


@contextmanager
def connected(spec: Spec, *, accept_new_host_keys: bool = False, hosts=None,
              options=None) -> Iterator[dict[str, Transport]]:
    """Transports to the spec's hosts (all of them by default), closed at the end; any unreachable host fails."""
    from deployctl.transport.connect import ConnectOptions, close_all, open_transports

    options = options or ConnectOptions(accept_new_host_keys=accept_new_host_keys)
    transports, errors = open_transports(hosts or spec.hosts, accept_new_host_keys=options.accept_new_host_keys,
                                         connect_timeout=options.timeout, on_wait=options.on_wait)
    try:
        if errors:
            first = next(iter(errors.values()))
            if len(errors) > 1:
                others = "; ".join(e.message for e in list(errors.values())[1:])
                first.message += f" (also: {others})"
            raise first
        yield transports
    finally:
        close_all(transports)


def gather_all(spec: Spec, transports: Mapping[str, Transport]) -> dict[str, DeployFacts]:
    return on_hosts(transports, lambda t: gather_deploy_facts(spec, t))


def render_ranktables(spec: Spec, transports: Mapping[str, Transport]) -> Optional[RanktableFiles]:
    """For a disaggregated spec: device IPs from every host, merged global + locals, cached in .deployctl/."""
    if spec.mode != "disaggregated":
        return None
    from deployctl.ranktable.build import build_global_for_spec

    devices = {h.name: tuple(sorted({d for i in spec.instances if i.host == h.name for d in i.devices}))
               for h in spec.used_hosts}
    worker_hosts = {name: transports[name] for name, ids in devices.items() if ids}
    device_ips = on_hosts(worker_hosts, lambda t: gather_device_ips(t, devices[t.name]))
    server_ips = {h.name: server_ip(h) for h in spec.used_hosts}
    built = build_global_for_spec(spec, device_ips, server_ips)
    contents = {built.global_name: built.global_json.encode()}
    for files in built.local_files.values():
        contents.update({name: text.encode() for name, text in files.items()})
    save_ranktables_locally(spec, contents)
    return RanktableFiles(built.global_name, dict(built.instance_files), contents)


def save_ranktables_locally(spec: Spec, contents: Mapping[str, bytes]) -> None:
    """Keep the rendered files beside the spec (`.deployctl/<deployment>/ranktables/`) for people to read."""
    directory = spec.state_dir / "ranktables"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in contents.items():
            (directory / name).write_bytes(data)
    except OSError:
        pass  # a read-only checkout must not stop a deploy: the hosts get the files regardless


def status_rows(spec: Spec, facts: Mapping[str, DeployFacts]) -> list[dict]:
    """The contract's `status` instances: one row per instance of the spec, plus strays of this deployment."""
    rows = []
    for instance in spec.instances:
        current = facts[instance.host].container(instance.name)
        rows.append({
            "name": instance.name,
            "role": instance.role,
            "host": instance.host,
            "devices": list(instance.devices),
            "port": instance.port,
            "container": current.id[:12] if current else None,
            "state": current.state if current else "missing",
            "healthy": bool(current and current.running and facts[instance.host].health.get(instance.port)),
            "image": current.image_id if current else None,
        })
    wanted = {i.name for i in spec.instances}
    for host, host_facts in facts.items():
        for container in host_facts.containers:
            if (container.label(LABEL_DEPLOYMENT) == spec.name and container.name not in wanted
                    and not container.name.endswith(PREVIOUS_SUFFIX)):
                rows.append({"name": container.name, "role": container.label("deployctl.role"), "host": host,
                             "devices": [], "port": None, "container": container.id[:12],
                             "state": container.state, "healthy": False, "image": container.image_id,
                             "note": "not in the spec (removed by the next up)"})
    return rows


def read_status(spec: Spec, transports: Mapping[str, Transport]) -> list[dict]:
    return status_rows(spec, gather_all(spec, transports))
