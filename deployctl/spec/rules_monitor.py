"""Rules on `monitor:`: the host that runs the monitoring containers is one of the spec's hosts."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem

if TYPE_CHECKING:
    from deployctl.spec.rules import Context


def check_monitor(c: "Context") -> Iterator[Problem]:
    if c.value(("monitor",), dict) is None:
        return
    host = c.value(("monitor", "host"), str)
    if host is not None and c.hosts is not None and host not in c.hosts:
        close = difflib.get_close_matches(host, c.hosts, n=1, cutoff=0.6)
        message = f"unknown host '{host}'" + (f" — did you mean '{close[0]}'?" if close else "")
        yield Problem(("monitor", "host"), message, hint=f"hosts in this spec: {', '.join(c.hosts)}")
    if c.value(("monitor", "deploy"), bool) is False and host is not None:
        yield Problem(("monitor", "host"), "monitor.host is only read with monitor.deploy: true", severity="warning",
                      hint="set monitor.deploy: true to run Prometheus and Grafana there, or remove monitor.host")
