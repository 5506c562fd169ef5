"""Wait until drained servers finish their requests (a Drain action), polling their /metrics from the front's
host; at the deadline, say what remained and go on: the graceful stop gives them its own timeout."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from deployctl.core import Command
from deployctl.execute.health import Cancelled, tries
from deployctl.facts.in_flight import in_flight_probe
from deployctl.plan.actions import Drain
from deployctl.transport import Transport


def run_drain(transport: Transport, drain: Drain, *, poll_interval: float, cancel: threading.Event,
              on_progress: Callable[[str], None]) -> dict[str, Optional[float]]:
    """Poll until every server runs and queues nothing (each round trip asks on the host until then, for about a
    poll period); returns what remained at the deadline: requests per server still holding some, None for one
    whose /metrics did not answer (empty when every server drained)."""
    probe = in_flight_probe(drain.servers, tries(poll_interval))  # the host waits between asks
    command = Command(probe.argv, check=False)
    deadline = time.monotonic() + drain.timeout
    while True:
        if cancel.is_set():
            raise Cancelled
        asked = time.monotonic()
        counts = probe.parse(transport.run(command, timeout=30).stdout)
        left = {name: n for name, n in counts.items() if n != 0}
        if not left:  # every server, not any one: a drain of several ends when the last is empty
            return {}
        if all(n is None for n in counts.values()):
            return left  # nothing to count: the graceful stop is all that is left to give them
        if time.monotonic() >= deadline:
            return left
        on_progress(f"draining: {sum(n or 0 for n in counts.values()):.0f} request(s) in flight")
        if cancel.wait(max(0.0, poll_interval - (time.monotonic() - asked))):
            raise Cancelled

def await_listed(transport: Transport, item, *, poll_interval: float, cancel: threading.Event,
                 on_progress: Callable[[str], None]) -> None:
    """Poll the front's list until it holds every key; HostError at the deadline, naming what it lacks."""
    from deployctl.errors import HostError
    from deployctl.plan.front import parse_list

    deadline = time.monotonic() + item.timeout
    missing = set(item.keys)
    while True:
        if cancel.is_set():
            raise Cancelled
        result = transport.run(item.command, timeout=30)
        try:
            missing = set(item.keys) - parse_list(item.front_kind, result.stdout)
        except (ValueError, KeyError, TypeError):
            pass  # not the front's answer yet: ask again
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise HostError(transport.name, f"the {item.front_kind} does not list {', '.join(sorted(missing))} "
                                            f"{item.timeout:g} s after it was put back", address=transport.address,
                            stderr_tail=(result.stdout or result.stderr)[-2000:],
                            hint="its log says why it refused the backend (`deployctl logs`)")
        on_progress(f"waiting for the {item.front_kind} to list {', '.join(sorted(missing))}")
        if cancel.wait(poll_interval):
            raise Cancelled



def sync_list(transport: Transport, item, *, poll_interval: float, cancel: threading.Event,
              on_progress: Callable[[str], None]) -> None:
    """Read the front's list, run its kind's remove and add calls for the difference from `wanted`, then wait
    until it lists every wanted backend (await_listed); HostError where it does not answer its list."""
    from deployctl.errors import HostError
    from deployctl.execute.executor import run_checked
    from deployctl.fronts import front_kind
    from deployctl.plan.actions import AwaitListed
    from deployctl.plan.front import list_difference, parse_roles

    result = transport.run(item.command, timeout=30)
    try:
        listed = parse_roles(item.front_kind, result.stdout)
    except (ValueError, KeyError, TypeError):
        raise HostError(transport.name, f"the {item.front_kind} did not answer its list", address=transport.address,
                        stderr_tail=(result.stdout or result.stderr)[-2000:]) from None
    kind = front_kind(item.front_kind)
    gone, new = list_difference(listed, item.wanted)
    for verb, changed in (("remove", gone), ("add", new)):
        if changed:
            on_progress(f"{verb}: {', '.join(b.key for b in changed)}")
            for command in kind.change_commands(item.port, changed, verb):
                run_checked(transport, command)
    keys = tuple(b.key for b in item.wanted)
    await_listed(transport, AwaitListed(item.front_kind, item.command, keys, item.timeout),
                 poll_interval=poll_interval, cancel=cancel, on_progress=on_progress)
