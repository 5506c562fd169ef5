"""What a drain asks, from the front's host, of the servers it took out of the front: each one's Prometheus
`/metrics` (vLLM's `vllm:num_requests_running` and `vllm:num_requests_waiting`), with the requests each still
holds. A constant script, every URL an argument; pure parsers."""

from __future__ import annotations

from typing import Mapping, Optional

from deployctl.bench.telemetry import parse_engine
from deployctl.facts.probe import Probe
from deployctl.facts.docker_logs import MARK, marked_blocks  # `MARK URL`, then the page, as watch's probes
from deployctl.servers.metric_names import line_pattern

NO_ANSWER = "!! no answer"
TICK_S = 0.05  # how often a drain asks, on the front's host (one round trip waits about a poll period there)
# args: TRIES, then the /metrics URLs. First asks every server up to TRIES times, TICK_S apart, until none holds a
# request — awk's sum of vLLM's two gauges only says when to stop asking; `in_flight` judges the pages printed
# last. Per server: `MARK URL`, then its page, or NO_ANSWER (no answer within 2 s, or an error).
IN_FLIGHT_SCRIPT = (
    'tries=$1; shift; i=1; while :; do busy=; for u; do curl --silent --max-time 2 --fail "$u" | awk '
    "'/^" + line_pattern("running", "waiting") + "[{ ]/ {n += $NF} END {exit (n > 0)}' || busy=1; done; "
    'if [ -z "$busy" ] || [ "$i" -ge "$tries" ]; then break; fi; i=$((i + 1)); sleep ' + str(TICK_S) + '; done; '
    'for u; do printf "' + MARK + ' %s\\n" "$u"; curl --silent --max-time 2 --fail "$u" || '
    'printf "\\n' + NO_ANSWER + '\\n"; done; true'
)


def in_flight_probe(servers: tuple[tuple[str, str], ...], tries: int = 1) -> Probe:
    """(name, /metrics URL) of each server: how many requests each runs or queues (see `in_flight`), once the
    servers held none or after `tries` asks TICK_S apart."""
    argv = ("sh", "-c", IN_FLIGHT_SCRIPT, "sh", str(tries), *(url for _, url in servers))
    return Probe(argv, lambda text: in_flight(text, servers), "in_flight", tool_name="curl")


def in_flight(text: str, servers: tuple[tuple[str, str], ...]) -> dict[str, Optional[float]]:
    """The answers to IN_FLIGHT_SCRIPT: requests each server runs or queues (None: its /metrics did not answer or
    has neither of vLLM's gauges)."""
    pages = {url.strip(): page for url, page in marked_blocks(text, 1)}
    out: dict[str, Optional[float]] = {}
    for name, url in servers:
        page = pages.get(url, "")
        engine = parse_engine(name, page) if page.strip() and NO_ANSWER not in page.splitlines() else None
        if engine is None or (engine.running is None and engine.waiting is None):
            out[name] = None
        else:
            out[name] = (engine.running or 0.0) + (engine.waiting or 0.0)
    return out


def left_in_flight(counts: Mapping[str, Optional[float]]) -> str:
    """What a drain leaves at its deadline, by server ("" when nothing)."""
    parts = [f"{name}: {int(n)} request(s)" for name, n in counts.items() if n]
    parts += [f"{name}: its /metrics did not answer" for name, n in counts.items() if n is None]
    return "; ".join(parts)
