"""`docker logs --timestamps`: the container's lines, or what docker itself said when it could not read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DAEMON_DOWN = ("Cannot connect to the Docker daemon", "Is the docker daemon running?")
NO_SUCH_CONTAINER = "No such container"


@dataclass(frozen=True)
class LogsAnswer:
    """Either lines ((timestamp, text), oldest first) or `failure`: missing | daemon | no-docker | failed."""

    lines: tuple[tuple[str, str], ...] = ()
    failure: Optional[str] = None
    detail: str = ""


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
