"""Open one transport per host, all hosts in parallel; an unreachable host is a result, not a crash.

Connections run in daemon threads and the main thread waits in short slices, so Ctrl-C acts at once: the
workers are told to give up (their sockets closed) and nobody joins a thread stuck in a handshake.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from deployctl.errors import HostError
from deployctl.spec.model import Host
from deployctl.transport import Transport

DEFAULT_CONNECT_TIMEOUT = 10.0
WAIT_NOTICE_S = 1.0  # a host still connecting after this long is announced ("waiting for ...")
_SLICE_S = 0.1
_GRACE_S = 2.0  # beyond the timeout, a worker that has still not answered is given up on


@dataclass(frozen=True)
class ConnectOptions:
    """How to connect, from the common flags: host-key trust, the timeout, where waits are announced."""

    accept_new_host_keys: bool = False
    timeout: float = DEFAULT_CONNECT_TIMEOUT
    on_wait: Optional[Callable[[str], None]] = None

    @classmethod
    def from_args(cls, args, ui=None) -> "ConnectOptions":
        timeout = getattr(args, "connect_timeout", None)  # a verb without the flag; 0 is refused by the parser
        return cls(accept_new_host_keys=getattr(args, "accept_new_host_keys", False),
                   timeout=DEFAULT_CONNECT_TIMEOUT if timeout is None else timeout,
                   on_wait=ui.info if ui is not None else None)


def endpoint(host: Host) -> str:
    """`name (addr:port)`, how a waiting line names a host."""
    from deployctl.transport.tcp import host_port

    return f"{host.name} ({host_port(host.address, host.ssh.port)})"


def open_transport(host: Host, *, accept_new_host_keys: bool = False,
                   connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                   cancel: Optional[threading.Event] = None) -> Transport:
    """A LocalTransport for `address: local`, else an SshTransport (paramiko imported only then)."""
    if host.is_local:
        from deployctl.transport.local import LocalTransport

        return LocalTransport(host.name)
    from deployctl.transport.ssh import SshTransport

    return SshTransport(host, accept_new_host_keys=accept_new_host_keys, connect_timeout=connect_timeout,
                        cancel=cancel)


def open_transports(
    hosts: Iterable[Host], *, accept_new_host_keys: bool = False, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    on_wait: Optional[Callable[[str], None]] = None,
    on_result: Optional[Callable[[str, object], None]] = None,
) -> tuple[dict[str, Transport], dict[str, HostError]]:
    """Connect to every host in parallel: (transports by host name, errors by host name).

    `on_wait(line)` hears of each host still connecting after a second; `on_result(name, transport or error)`
    of each host as it is settled."""
    hosts = list(hosts)
    transports: dict[str, Transport] = {}
    errors: dict[str, HostError] = {}
    if not hosts:
        return transports, errors
    cancel = threading.Event()
    results: queue.Queue = queue.Queue()

    def connect(host: Host) -> None:
        try:
            outcome = open_transport(host, accept_new_host_keys=accept_new_host_keys,
                                     connect_timeout=connect_timeout, cancel=cancel)
        except HostError as error:
            outcome = error
        except Exception as error:  # a worker must always answer, or the caller would wait for nothing
            outcome = HostError(host.name, f"cannot connect: {error}", address=host.address)
        if cancel.is_set() and not isinstance(outcome, HostError):
            outcome.close()  # the caller has given up on it
            return
        results.put((host.name, outcome))

    for host in hosts:
        threading.Thread(target=connect, args=(host,), name=f"connect-{host.name}", daemon=True).start()
    by_name = {host.name: host for host in hosts}
    pending = set(by_name)
    started = time.monotonic()
    announced = False
    try:
        while pending:
            try:
                name, outcome = results.get(timeout=_SLICE_S)
            except queue.Empty:
                waited = time.monotonic() - started
                if on_wait is not None and not announced and waited >= WAIT_NOTICE_S:
                    announced = True
                    for name in sorted(pending, key=list(by_name).index):
                        on_wait(f"waiting for {endpoint(by_name[name])}… (giving up after "
                                f"{connect_timeout:g} s, --connect-timeout)")
                if waited >= connect_timeout + _GRACE_S:
                    for name in list(pending):
                        _settle(name, HostError(name, f"no answer from {endpoint(by_name[name])} within "
                                                f"{connect_timeout:g} s", address=by_name[name].address),
                                transports, errors, on_result)
                    pending.clear()
                    cancel.set()
                continue
            pending.discard(name)
            _settle(name, outcome, transports, errors, on_result)
    except BaseException:
        cancel.set()
        close_all(transports)
        raise
    order = list(by_name)  # the spec's order, not the order hosts happened to answer in
    return ({n: transports[n] for n in order if n in transports}, {n: errors[n] for n in order if n in errors})


def _settle(name, outcome, transports, errors, on_result) -> None:
    (errors if isinstance(outcome, HostError) else transports)[name] = outcome
    if on_result is not None:
        on_result(name, outcome)


def close_all(transports: dict[str, Transport]) -> None:
    for transport in transports.values():
        transport.close()
