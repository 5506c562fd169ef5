"""What `deployctl watch` asks each host once per probe, beside the containers and the one-token generate: each API
server's health status code and Prometheus `/metrics` (its engines' progress counters), and each container's log
lines since the last probe. Constant scripts, every value an argument; pure parsers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.bench.telemetry import Engine, parse_engines
from deployctl.facts.docker_logs import MARK, mark_line, marked_blocks, split_stamp
from deployctl.facts.probe import Probe

LOG_LINES = 2000  # new lines read per container and probe (the newest); a signature in a flood of more is missed

# args: SECONDS, then PORT/HEALTH_PATH words. Per server: `MARK PORT CODE` (MARK: facts/docker_logs.py; 000: no
# answer within SECONDS), then its /metrics text.
PROGRESS_SCRIPT = (
    't=$1; shift; for x in "$@"; do p=${x%%/*}; printf "' + MARK + ' %s %s\\n" "$p" "$(curl --silent --max-time "$t" '
    '--output /dev/null --write-out "%{http_code}" "http://127.0.0.1:$p/${x#*/}")"; curl --silent --max-time "$t" '
    '"http://127.0.0.1:$p/metrics"; echo; done; true'
)
# args: "NAME SINCE" words, SINCE a docker timestamp or `-` (no baseline yet: only the newest line, for its time).
# Per container: `MARK NAME`, then `docker logs --timestamps` lines (both streams: vLLM logs on stderr).
LOGS_SCRIPT = (
    'for x in "$@"; do c=${x%% *}; s=${x#* }; ' + mark_line("c") + 'if [ "$s" = - ]; then '
    'docker logs --timestamps --tail 1 "$c" 2>&1; else docker logs --timestamps --since "$s" "$c" 2>&1 | '
    f'tail -n {LOG_LINES}; fi; done; true'
)


@dataclass(frozen=True)
class ServerProgress:
    """One API server at one probe: its health path's HTTP status (0: no answer) and its engines' counters."""

    health_code: int
    engines: Mapping[str, Engine]  # engine index -> counters; empty: no /metrics in vLLM's names


def progress_probe(targets: tuple[tuple[int, str], ...], wait: float = 2.0) -> Probe:
    """(port, health path) of each API server on the host; `wait`: seconds each read (health, /metrics) may take."""
    argv = ("sh", "-c", PROGRESS_SCRIPT, "sh", f"{wait:g}", *(f"{port}{path}" for port, path in targets))
    # two reads per server, one after another: a host of 8 ranks may take 16 x `wait` to answer, and is no less
    # reachable for it
    return Probe(argv, parse_progress, "progress", tool_name="curl", waits_s=2 * wait * len(targets))


def parse_progress(text: str) -> dict[int, ServerProgress]:
    out: dict[int, ServerProgress] = {}
    for port, code, body in marked_blocks(text, 2):
        if port.isdigit():
            out[int(port)] = ServerProgress(int(code) if code.isdigit() else 0, parse_engines(body))
    return out


@dataclass(frozen=True)
class NewLines:
    """A container's log lines after `since` ((stamp, text), oldest first), and the newest stamp seen."""

    lines: tuple[tuple[str, str], ...]
    last: Optional[str]


def logs_probe(since: Mapping[str, Optional[str]]) -> Probe:
    """container name -> the last log stamp already read (None: none yet)."""
    argv = ("sh", "-c", LOGS_SCRIPT, "sh", *(f"{name} {stamp or '-'}" for name, stamp in since.items()))
    return Probe(argv, lambda text: parse_new_lines(text, since), "new_log_lines", tool_name="docker")


def parse_new_lines(text: str, since: Mapping[str, Optional[str]]) -> dict[str, NewLines]:
    """Each container's lines strictly after its `since` (`--since` includes the boundary); without a `since` the
    newest line only sets the baseline and counts as nothing new. Lines without docker's stamp (docker's own
    errors, a missing container) are not the container's."""
    out = {}
    for name, body in marked_blocks(text, 1):
        # docker's stamps compare as strings (fixed width: facts/docker_logs.py)
        stamped = [pair for pair in map(split_stamp, body.splitlines()) if pair is not None]
        before = since.get(name)
        last = max((s for s, _ in stamped), default=before)
        new = tuple((s, t) for s, t in stamped if before is not None and s > before)
        out[name] = NewLines(new, last)
    return out

