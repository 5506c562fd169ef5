"""Wait until a container serves its health path; fail at once if it exits or its daemon stops answering."""

from __future__ import annotations

import threading
import time
from typing import Callable

from deployctl.core import Command
from deployctl.errors import HostError
from deployctl.facts.in_flight import TICK_S  # one tick for the host-side waits: health and drain
from deployctl.plan.model import HealthCheck
from deployctl.transport import Transport


# One round trip per poll period: the health path's HTTP status, asked up to $4 times TICK_S apart on the host
# until it answers 200 (so a server that comes up is seen within a tick, not at the next round trip), then the
# container's state, then its last log line.
HEALTH_SCRIPT = (
    'i=1; while :; do c=$(curl --silent --max-time 2 --output /dev/null --write-out "%{http_code}" '
    '"http://127.0.0.1:$2$3"); if [ "$c" = 200 ] || [ "$i" -ge "${4:-1}" ]; then break; fi; i=$((i + 1)); '
    f'sleep {TICK_S}; done; '
    # `docker inspect --format` prints an empty line when it fails: judge by its status, and tell a missing
    # container from a daemon that stopped answering.
    's=$(docker inspect --format "{{.State.Status}} {{.State.ExitCode}}" "$1" 2>/dev/null) && echo "$s" || '
    '{ docker version --format "{{.Server.Version}}" >/dev/null 2>&1 && echo "missing 0" || echo "no-daemon 0"; }; '
    'echo "$c"; docker logs --tail 1 "$1" 2>&1 | tail -n 1'
)


def tries(poll_interval: float) -> int:
    """How many times one round trip asks, TICK_S apart, to wait about one poll period on the host."""
    return max(1, round(poll_interval / TICK_S))


class Cancelled(Exception):
    """Ctrl-C reached the executor: the forward path stops where it is."""


def wait_healthy(transport: Transport, health: HealthCheck, *, timeout: float, poll_interval: float,
                 cancel: threading.Event, on_progress: Callable[[str], None]) -> None:
    """Poll until `health` answers 200 (each round trip waits on the host, see HEALTH_SCRIPT); HostError when the
    container exits, its daemon stops, or time runs out."""
    deadline = time.monotonic() + timeout
    command = Command(("sh", "-c", HEALTH_SCRIPT, "sh", health.container, str(health.port), health.path,
                       str(tries(poll_interval))))
    last_line = ""
    while True:
        if cancel.is_set():
            raise Cancelled
        asked = time.monotonic()
        lines = (transport.run(command, timeout=30).stdout.splitlines() + ["", "", ""])[:3]
        state, http, last_line = lines[0].split(" ")[0], lines[1].strip(), lines[2].strip() or last_line
        if http == "200":
            return
        if state == "no-daemon":
            raise HostError(transport.name, f"the Docker daemon is not reachable (waiting for {health.container})",
                            address=transport.address,
                            hint="start it (systemctl start docker) and check `docker ps` on the host; "
                                 "then run `up` again")
        if state in ("exited", "dead", "missing"):
            raise HostError(transport.name, f"{health.container} {state} while starting", address=transport.address,
                            stderr_tail=log_tail(transport, health.container))
        on_progress(last_line)
        if time.monotonic() > deadline:
            raise HostError(transport.name, f"{health.container} not healthy after {timeout:.0f} s",
                            address=transport.address, stderr_tail=log_tail(transport, health.container),
                            hint="raise --health-timeout if the model needs longer to load")
        if cancel.wait(max(0.0, poll_interval - (time.monotonic() - asked))):  # the host waited already
            raise Cancelled


def log_tail(transport: Transport, container: str) -> str:
    result = transport.run(Command(("docker", "logs", "--tail", "20", container)), timeout=30)
    return (result.stdout + result.stderr)[-3000:]
