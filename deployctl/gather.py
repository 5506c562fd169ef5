"""Gather what `up`, `down` and `status` need from each host: one round trip per host, all hosts in parallel.

Scripts here are constants; every value reaches them as a positional argument, never pasted in.
"""

from __future__ import annotations

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, TypeVar

from deployctl.errors import HostError
from deployctl.facts.docker import parse_docker_inspect
from deployctl.plan.containers import ranktable_dir
from deployctl.core import Command
from deployctl.plan.up import DeployFacts, health_path
from deployctl.spec.model import Host, Spec
from deployctl.transport import Transport

T = TypeVar("T")
SEPARATOR = "@@deployctl@@"

_DEPLOY_SCRIPT = (
    'ids=$(docker ps --all --quiet --no-trunc) || exit 97; '
    'if [ -n "$ids" ]; then docker inspect $ids 2>/dev/null || true; else echo "[]"; fi; '
    f'echo {SEPARATOR}; '
    'if [ -n "$1" ]; then docker image inspect --format "{{.Id}}" "$1" 2>/dev/null; fi; '
    f'echo {SEPARATOR}; '
    'shift; while [ "$1" != "--" ]; do [ -d "$1" ] && sha256sum -- "$1"/* 2>/dev/null; shift; done; shift; '
    f'echo {SEPARATOR}; '
    'h=$1; shift; for p in "$@"; do printf "%s %s\\n" "$p" "$(curl --silent --max-time 2 --output /dev/null '
    '--write-out "%{http_code}" "http://127.0.0.1:$p$h")"; done; true'
)

_DEVICE_IP_SCRIPT = (
    'PATH="$PATH:/usr/local/Ascend/driver/tools"; '
    'for i in "$@"; do echo "@@dev $i"; hccn_tool -i "$i" -ip -g 2>/dev/null; echo "@@rc $?"; done; '
    'echo "@@conf"; cat /etc/hccn.conf 2>/dev/null; true'
)


def on_hosts(transports: Mapping[str, Transport], work: Callable[[Transport], T]) -> dict[str, T]:
    """Run `work` on every host in parallel; a HostError propagates (the first one, after all finished)."""
    names = list(transports)
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(64, len(names))) as pool:
        futures = {name: pool.submit(work, transports[name]) for name in names}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        raise errors[0]
    return {name: future.result() for name, future in futures.items()}


def gather_deploy_facts(spec: Spec, transport: Transport) -> DeployFacts:
    """Containers (all, with labels and devices), the spec image's ID, and hashes of deployctl's files."""
    directories = (ranktable_dir(spec), f"{spec.remote_state_dir}/env")
    if spec.server == "triton":  # the model repository's files (config.pbtxt, 1/model.json), one level each
        from deployctl.plan.triton import model_dir

        directories += (model_dir(spec), f"{model_dir(spec)}/1")
    ports = [str(i.port) for i in spec.instances if i.host == transport.name]
    # health as `up` waits for it (one definition per server), so status and up agree
    command = Command(("sh", "-c", _DEPLOY_SCRIPT, "sh", spec.image.name or "", *directories, "--", health_path(spec),
                       *ports))
    result = transport.run(command, timeout=60)
    if result.exit_code == 97:
        raise HostError(transport.name, "the Docker daemon is not reachable",
                        address=getattr(transport, "address", None), stderr_tail=result.stderr,
                        hint="start it (systemctl start docker) and check `docker ps` on the host")
    inspect_text, image_text, hashes_text, health_text = (result.stdout.split(SEPARATOR + "\n") + ["", "", ""])[:4]
    hashes = {}
    for line in hashes_text.splitlines():
        digest, _, path = line.partition("  ")
        if path:
            hashes[path] = digest
    return DeployFacts(
        containers=parse_docker_inspect(inspect_text),
        image_id=image_text.strip() or None,
        file_hashes=hashes,
        health=parse_health_codes(health_text),
    )


def parse_health_codes(text: str) -> dict[int, bool]:
    """`<port> <http status>` lines -> port: answered 200."""
    health = {}
    for line in text.splitlines():
        port, _, code = line.partition(" ")
        if port.isdigit():
            health[int(port)] = code.strip() == "200"
    return health


def gather_device_ips(transport: Transport, devices: tuple[int, ...]) -> dict[int, str]:
    """Each NPU's RoCE address: `hccn_tool -i N -ip -g`, else /etc/hccn.conf `address_N`; else a RanktableError."""
    from deployctl.facts.files import HCCN_CONF, parse_hccn_conf
    from deployctl.ranktable.device_ips import ToolAnswer, resolve_device_ip

    result = transport.run(Command(("sh", "-c", _DEVICE_IP_SCRIPT, "sh", *map(str, devices))), timeout=60)
    text, _, conf_text = result.stdout.partition("@@conf\n")
    conf = parse_hccn_conf(conf_text) if conf_text.strip() else None
    answers: dict[int, ToolAnswer] = {}
    for block in text.split("@@dev ")[1:]:
        head, _, rest = block.partition("\n")
        output, _, code = rest.rpartition("@@rc ")
        code = int(code.strip() or 1)
        answers[int(head)] = ToolAnswer(None if code == 127 else output, code)
    return {d: resolve_device_ip(d, answers.get(d, ToolAnswer(None, 127)), conf, HCCN_CONF, where=transport.name)
            for d in devices}


def server_ip(host: Host, transport: Transport | None = None) -> str:
    """The address ranktables give the host: the spec's IPv4 address, a name resolved forward (never reverse
    DNS), or for `local` an address bound on this machine. Any failure is a HostError naming host and address."""
    if host.is_local:
        from deployctl.transport.local import LocalTransport

        return bound_host_ip(transport or LocalTransport(host.name), host.name,
                             hint="write the host's address in the spec instead of `local`")
    try:
        return str(ipaddress.IPv4Address(host.address))
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host.address, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError; an over-long label a UnicodeError
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise HostError(host.name, f"cannot resolve {host.address!r} to an IPv4 address: {why}",
                        address=host.address, hint="write the host's IPv4 address in the spec") from None
    return found[0][4][0]


def bound_host_ip(transport: Transport, name: str, *, hint: str) -> str:
    """An IPv4 address bound on the transport's host: its default route's interface's, else the first global one."""
    from deployctl.errors import RanktableError
    from deployctl.ranktable.host_address import (
        DEFAULT_ROUTE_ARGV, IP_ADDR_ARGV, choose_host_ip, parse_default_route, parse_ip_addr,
    )

    addresses = transport.run(Command(IP_ADDR_ARGV), timeout=10)
    if not addresses.ok:
        detail = addresses.stderr.strip().splitlines()[-1] if addresses.stderr.strip() else ""
        raise HostError(name, f"cannot tell this host's address: `{' '.join(IP_ADDR_ARGV)}` exited "
                              f"{addresses.exit_code}{': ' + detail if detail else ''}", hint=hint)
    route = transport.run(Command(DEFAULT_ROUTE_ARGV), timeout=10)
    try:
        return choose_host_ip(parse_ip_addr(addresses.stdout), parse_default_route(route.stdout) if route.ok else None)
    except RanktableError as error:
        raise HostError(name, error.message, hint=hint) from None
