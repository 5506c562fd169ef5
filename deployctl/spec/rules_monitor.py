"""Rules of `monitor:`: the numbers inside its strings (a HOST:PORT's port, a duration's size, a URL's port), which
the schema's patterns only shape, each refused at its own path."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

from deployctl.errors import Problem
from deployctl.spec.show import quoted

if TYPE_CHECKING:
    from deployctl.spec.rules import Context

MAX_PORT = 65535
# Prometheus scrapes and evaluates at this interval: under a second floods every server's /metrics, over ten
# minutes leaves no two samples inside the 5 min lookback that rate() and the alerts need
SCRAPE_MIN_MS, SCRAPE_MAX_MS = 1_000, 600_000
SLO_MAX_MS = 3_600_000  # vLLM's largest TTFT bucket is 2560 s (vllm/v1/metrics/loggers.py)


def _port(text: str) -> int | None:
    found = re.search(r":([0-9]+)$", text)
    return int(found.group(1)) if found else None


def check_monitor(c: "Context") -> Iterator[Problem]:
    from deployctl.monitor.durations import millis

    prober = c.value(("monitor", "blackbox_exporter"), str)
    port = _port(prober) if prober is not None else None
    if port is not None and not 1 <= port <= MAX_PORT:
        yield Problem(("monitor", "blackbox_exporter"), f"{quoted(prober)}: port {port} is not in 1-{MAX_PORT}",
                      hint="blackbox_exporter listens on 9115 by default: 127.0.0.1:9115")
    url = c.value(("monitor", "prometheus_url"), str)
    found = re.fullmatch(r"https?://[^/:\s]+:([0-9]+)/?", url) if url is not None else None
    if found and not 1 <= int(found.group(1)) <= MAX_PORT:
        yield Problem(("monitor", "prometheus_url"), f"{quoted(url)}: port {found.group(1)} is not in 1-{MAX_PORT}",
                      hint="Prometheus listens on 9090 by default: http://127.0.0.1:9090")
    for key, low, high in (("scrape_interval", SCRAPE_MIN_MS, SCRAPE_MAX_MS), ("ttft_p99", 1, SLO_MAX_MS)):
        text = c.value(("monitor", key), str)
        try:
            ms = millis(text) if text is not None else None
        except ValueError:
            continue  # the schema's pattern said it
        if ms is not None and not low <= ms <= high:
            yield Problem(("monitor", key), f"{quoted(text)} is not between {_shown(low)} and {_shown(high)}",
                          hint="e.g. 15s" if key == "scrape_interval" else "e.g. 5s")


def _shown(ms: int) -> str:
    from deployctl.monitor.durations import duration

    return duration(ms) if ms >= 1000 else f"{ms}ms"
