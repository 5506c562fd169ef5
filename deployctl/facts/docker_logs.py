"""`docker logs --timestamps`: the container's lines, or what docker itself said when it could not read them; and
what the probes that read several containers' logs in one round trip share (pure): the marker line that opens each
container's block, the blocks, docker's timestamp on each line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator, Optional

MARK = "@@deployctl@@"  # a line `MARK word...` opens one block (one container's, one server's) of a probe's output
# docker writes RFC 3339 with nanoseconds, fixed width (jsonmessage.RFC3339NanoFixed), so two stamps of its logs
# compare as strings; `docker inspect`'s times have the same form
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")

DAEMON_DOWN = ("Cannot connect to the Docker daemon", "Is the docker daemon running?")
NO_SUCH_CONTAINER = "No such container"


@dataclass(frozen=True)
class LogsAnswer:
    """Either lines ((timestamp, text), oldest first) or `failure`: missing | daemon | no-docker | failed."""

    lines: tuple[tuple[str, str], ...] = ()
    failure: Optional[str] = None
    detail: str = ""


def logs_argv(container: str, since: Optional[str] = None, tail: int = 100) -> tuple[str, ...]:
    """`docker logs --timestamps`: the lines after `since` (a docker timestamp), else the last `tail`."""
    return ("docker", "logs", "--timestamps", *(("--since", since) if since else ("--tail", str(tail))), container)


def parse_docker_logs(exit_code: int, stdout: str, stderr: str) -> LogsAnswer:
    """Exit 0: stdout and stderr are the container's two streams, merged by timestamp. Otherwise they are
    docker's own error (the container's output never comes with a non-zero exit of `docker logs`)."""
    if exit_code == 0:
        pairs = []
        for line in (stdout + stderr).splitlines():
            stamp, _, text = line.partition(" ")
            pairs.append((stamp, text))
        return LogsAnswer(tuple(sorted(pairs)))
    said = (stderr or stdout).strip()
    if exit_code == 127:
        return LogsAnswer(failure="no-docker", detail=said)
    if NO_SUCH_CONTAINER in said:
        return LogsAnswer(failure="missing", detail=said)
    if any(marker in said for marker in DAEMON_DOWN):
        return LogsAnswer(failure="daemon", detail=said)
    return LogsAnswer(failure="failed", detail=said or f"exit {exit_code}")


def mark_line(variable: str) -> str:
    """The shell that prints a block's marker line for the value of `variable` (in a probe's script)."""
    return f'printf "%s %s\\n" "{MARK}" "${variable}"; '


def marked_blocks(text: str, words: int) -> Iterator[tuple[str, ...]]:
    """(word..., body) per `MARK word...` line: the header's first `words` words (missing ones empty), then the
    text up to the next marker."""
    header, body = None, []
    for line in text.split("\n"):
        if line.startswith(MARK + " "):
            if header is not None:
                yield (*header, "\n".join(body))
            header = (line[len(MARK) + 1:].split(" ", words - 1) + [""] * words)[:words]
            body = []
        elif header is not None:
            body.append(line)
    if header is not None:
        yield (*header, "\n".join(body))


def split_stamp(line: str) -> Optional[tuple[str, str]]:
    """`2026-11-25T23:05:12.123456789Z message` -> (stamp, message); None when the line does not start with one
    (docker's own errors, a missing container)."""
    stamp, _, message = line.rstrip("\r").partition(" ")
    return (stamp, message) if _STAMP.match(stamp) else None


def stamp_seconds(stamp: str) -> Optional[float]:
    """A docker stamp as epoch seconds (its zone applied); None when it is not one."""
    match = _STAMP.match(stamp)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    try:
        moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    offset = 0.0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return moment.replace(tzinfo=timezone.utc).timestamp() - offset + (float("0." + fraction) if fraction else 0.0)
