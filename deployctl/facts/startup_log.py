"""When a server's start-up phases ended, read from its own log (pure): weights loaded, graph compiled (torch.compile
or graph capture, or the compiled graphs loaded from the cache), server ready. The log is `docker logs --timestamps`
(docker's RFC 3339 time on every line, so the server's own log format, which vLLM prints to the second, does not
matter); the patterns are the server profile's (data/server_profiles.json). All times are the host's clock: only
differences between them are used, so the control machine's clock never needs to agree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping, Optional

from deployctl.facts.probe import Probe

LOG_LINES = 20000  # a start-up is the log's head; a long-running server's requests are not read
SEPARATOR = "==deployctl-startup-log== "
# $@: container names. For each: a separator line, the container's start time, then its log's head, timestamped.
_SCRIPT = ('for n in "$@"; do printf "%s%s\\n" "' + SEPARATOR + '" "$n"; '
           'docker inspect -f "{{.State.StartedAt}}" "$n" 2>/dev/null || echo -; '
           f'docker logs --timestamps "$n" 2>&1 | head -n {LOG_LINES}; done')
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)\s?(.*)$")


@dataclass(frozen=True)
class StartupMilestones:
    """A server's start (the container's StartedAt) and when each phase of the profile ended (epoch seconds,
    host clock); a phase it never printed is absent."""

    started: Optional[float]
    ended: Mapping[str, float] = field(default_factory=dict)


def startup_log_probe(containers: tuple[str, ...]) -> Probe:
    return Probe(("sh", "-c", _SCRIPT, "sh", *containers), lambda text: text, "startup_log", tool_name="docker")


def parse_stamp(text: str) -> Optional[tuple[float, str]]:
    """`2026-11-25T23:05:12.123456789Z message` -> (epoch seconds, message); None when the line has no stamp."""
    match = _STAMP.match(text.strip("\r"))
    if match is None:
        return None
    whole, fraction, zone, message = match.groups()
    try:
        moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    offset = 0.0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    seconds = moment.replace(tzinfo=timezone.utc).timestamp() - offset
    return seconds + (float("0." + fraction) if fraction else 0.0), message


def milestones_of(started_line: str, log: list[str], patterns: Mapping[str, tuple[str, ...]]) -> StartupMilestones:
    """One container: the last line matching each phase's patterns ends that phase."""
    started = parse_stamp(started_line.strip() + " ")
    compiled = {phase: [re.compile(p) for p in found] for phase, found in patterns.items()}
    ended: dict[str, float] = {}
    for line in log:
        stamped = parse_stamp(line)
        if stamped is None:
            continue
        moment, message = stamped
        for phase, regexes in compiled.items():
            if any(r.search(message) for r in regexes):
                ended[phase] = moment
    return StartupMilestones(started[0] if started else None, ended)


def parse_startup_logs(text: str, patterns: Mapping[str, tuple[str, ...]]) -> dict[str, StartupMilestones]:
    """The probe's output for several containers -> container name -> its milestones."""
    out: dict[str, StartupMilestones] = {}
    blocks: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        if line.startswith(SEPARATOR):
            name = line[len(SEPARATOR):].strip()
            blocks[name] = []
        elif name is not None:
            blocks[name].append(line)
    for name, lines in blocks.items():
        out[name] = milestones_of(lines[0] if lines else "-", lines[1:], patterns)
    return out
