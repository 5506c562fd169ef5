"""When a server's start-up phases ended, read from its own log (pure): weights loaded, graph compiled (torch.compile
or graph capture, or the compiled graphs loaded from the cache), server ready. The log is `docker logs --timestamps`
(docker's RFC 3339 time on every line, so the server's own log format, which vLLM prints to the second, does not
matter); the patterns are the server profile's (data/server_profiles.json). All times are the host's clock: only
differences between them are used, so the control machine's clock never needs to agree."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from deployctl.facts.docker_logs import mark_line, marked_blocks, split_stamp, stamp_seconds
from deployctl.facts.probe import Probe

LOG_LINES = 20000  # a start-up is the log's head; a long-running server's requests are not read
# $@: container names. For each: its marker line (facts/docker_logs.py), the container's start time, then its
# log's head, timestamped.
_SCRIPT = ('for n in "$@"; do ' + mark_line("n") +
           'docker inspect -f "{{.State.StartedAt}}" "$n" 2>/dev/null || echo -; '
           f'docker logs --timestamps "$n" 2>&1 | head -n {LOG_LINES}; done')


@dataclass(frozen=True)
class StartupMilestones:
    """A server's start (the container's StartedAt) and when each phase of the profile ended (epoch seconds,
    host clock); a phase it never printed is absent."""

    started: Optional[float]
    ended: Mapping[str, float] = field(default_factory=dict)


def startup_log_probe(containers: tuple[str, ...], patterns: Mapping[str, tuple[str, ...]]) -> Probe:
    """The start-up logs of `containers`, parsed with the server profile's `patterns` (container -> milestones)."""
    return Probe(("sh", "-c", _SCRIPT, "sh", *containers), lambda text: parse_startup_logs(text, patterns),
                 "startup_log", tool_name="docker")


def parse_stamp(text: str) -> Optional[tuple[float, str]]:
    """`2026-11-25T23:05:12.123456789Z message` -> (epoch seconds, message); None when the line has no stamp."""
    stamped = split_stamp(text)
    seconds = stamp_seconds(stamped[0]) if stamped else None
    return None if seconds is None else (seconds, stamped[1])


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
    for name, body in marked_blocks(text, 1):
        lines = body.splitlines()
        out[name.strip()] = milestones_of(lines[0] if lines else "-", lines[1:], patterns)
    return out
