"""Open the spec's hosts: the common connection flags, and transports closed at the end whatever happens."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

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
    know_secrets(spec)
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


def know_secrets(spec: Spec) -> None:
    """Whatever the hosts say from here on is quoted redacted of the spec's secret values (deployctl/redaction.py)."""
    import os

    from deployctl.redaction import know

    know(spec, os.environ)
