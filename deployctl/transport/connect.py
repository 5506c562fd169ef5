"""Open one transport per host, all hosts in parallel; an unreachable host is a result, not a crash."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from deployctl.errors import HostError
from deployctl.spec.model import Host
from deployctl.transport import Transport


def open_transport(host: Host, *, accept_new_host_keys: bool = False, connect_timeout: float = 10.0) -> Transport:
    """A LocalTransport for `address: local`, else an SshTransport (paramiko imported only then)."""
    if host.is_local:
        from deployctl.transport.local import LocalTransport

        return LocalTransport(host.name)
    from deployctl.transport.ssh import SshTransport

    return SshTransport(host, accept_new_host_keys=accept_new_host_keys, connect_timeout=connect_timeout)


def open_transports(
    hosts: Iterable[Host], *, accept_new_host_keys: bool = False, connect_timeout: float = 10.0
) -> tuple[dict[str, Transport], dict[str, HostError]]:
    """Connect to every host in parallel: (transports by host name, errors by host name)."""
    hosts = list(hosts)
    transports: dict[str, Transport] = {}
    errors: dict[str, HostError] = {}
    if not hosts:
        return transports, errors

    def connect(host: Host):
        try:
            return host.name, open_transport(
                host, accept_new_host_keys=accept_new_host_keys, connect_timeout=connect_timeout
            )
        except HostError as error:
            return host.name, error

    with ThreadPoolExecutor(max_workers=min(64, len(hosts))) as pool:
        for name, outcome in pool.map(connect, hosts):
            (errors if isinstance(outcome, HostError) else transports)[name] = outcome
    return transports, errors


def close_all(transports: dict[str, Transport]) -> None:
    for transport in transports.values():
        transport.close()
