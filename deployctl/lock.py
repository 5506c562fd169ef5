"""The deploy lock and history on the spec's first host (`/var/lib/deployctl/<deployment>/`)."""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from datetime import datetime, timezone

from deployctl.errors import HostError
from deployctl.core import Command
from deployctl.transport import Transport

_LOCKED = 75
# mkdir is atomic: whoever creates lock/ holds it; the holder's note is written inside it. Acquiring runs under
# flock on the host (released by the kernel when the shell ends, even killed), so taking over a dead holder is a
# compare-and-swap: lock/ is removed only while its note is still the one the caller judged dead ($2); two
# deploys taking over the same stale lock cannot both remove it and both create their own.
_ACQUIRE = (
    'mkdir -p "$1" && exec 9>>"$1/.lock-guard" && flock 9 || exit 1; '
    'if [ -n "$2" ] && [ "$(cat "$1/lock/holder" 2>/dev/null)" = "$2" ]; then rm -rf "$1/lock"; fi; '
    'if mkdir "$1/lock" 2>/dev/null; then cat > "$1/lock/holder"; exit 0; fi; '
    f'cat "$1/lock/holder" 2>/dev/null; exit {_LOCKED}'
)
_APPEND_AND_RELEASE = 'cat >> "$1/history.jsonl"; rm -rf "$1/lock"'


def holder_note(action: str) -> dict:
    return {
        "user": getpass.getuser(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "action": action,
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


class DeployLock:
    """Held for the whole of an `up` or `down`; refused (or waited for) when someone else holds it."""

    def __init__(self, transport: Transport, state_dir: str, action: str, wait: float = 0.0) -> None:
        self.transport, self.state_dir, self.action, self.wait = transport, state_dir, action, wait
        self.held = False
        self.history: dict | None = None  # set by the holder: appended to the history as the lock is released

    def __enter__(self) -> "DeployLock":
        deadline = time.monotonic() + self.wait
        note = json.dumps(holder_note(self.action)).encode()
        stale = ""  # a holder judged dead: the next attempt takes the lock over if it is still that one
        while True:
            argv = ("sh", "-c", _ACQUIRE, "sh", self.state_dir, stale)
            result = self.transport.run(Command(argv, stdin=note), timeout=30)
            if result.ok:
                self.held = True
                return self
            if result.exit_code != _LOCKED:
                raise HostError(self.transport.name, f"cannot take the deploy lock: {result.stderr.strip()}")
            # Left by a deploy from this machine whose process is gone (killed, or its host dropped before it
            # could release): nobody holds it any more.
            stale = result.stdout.rstrip("\n") if holder_is_dead(result.stdout) else ""
            if stale:
                continue
            if time.monotonic() >= deadline:
                raise HostError(
                    self.transport.name,
                    f"deployment is locked by another deploy: {_describe(result.stdout)}",
                    address=self.transport.address,
                    hint=f"wait for it (--lock-wait SECONDS); if that deploy died, remove {self.state_dir}/lock on "
                    f"{self.transport.name}",
                )
            time.sleep(1.0)

    def __exit__(self, *exc) -> None:
        if not self.held:
            return
        if self.history is not None:  # one round trip: the history line, then the release
            line = history_line(self.history)
            self.transport.run(Command(("sh", "-c", _APPEND_AND_RELEASE, "sh", self.state_dir), stdin=line), timeout=30)
        else:
            self.transport.run(Command(("rm", "-rf", f"{self.state_dir}/lock")), timeout=30)
        self.held = False


def holder_is_dead(holder_text: str) -> bool:
    """True when the holder ran on this machine and its process no longer exists. A damaged note is never judged
    dead: whoever wrote it may still be deploying."""
    holder = _holder(holder_text)
    if holder is None or holder["host"] != socket.gethostname():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it lives, as another user
        return False
    return False


_NOTE_TEXT = ("user", "host", "action", "since")


def _holder(holder_text: str) -> dict | None:
    """The holder's note as holder_note wrote it, or None when it is damaged (cut, not an object, a field missing or
    of another type, a pid no process can have: a negative one would name a process group to os.kill)."""
    try:
        holder = json.loads(holder_text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(holder, dict) or not all(isinstance(holder.get(k), str) for k in _NOTE_TEXT):
        return None
    pid = holder.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2 ** 31:
        return None
    return holder


def _describe(holder_text: str) -> str:
    holder = _holder(holder_text)
    if holder is None:
        return "holder unknown (its note is damaged)"
    return f"{holder['action']} by {holder['user']}@{holder['host']} (pid {holder['pid']}) since {holder['since']}"


def history_line(record: dict) -> bytes:
    """One JSON line per `up`/`down`: time, user, spec digest, result."""
    from deployctl.redaction import redact_record

    # written on a host, read back by status and diagnose: a reason quoting a host's text holds no secret
    return (json.dumps({"time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "user": getpass.getuser(), **redact_record(record)}) + "\n").encode()


def history_path(state_dir: str) -> str:
    return f"{state_dir}/history.jsonl"


def last_time_to_serve(history_text: str) -> dict | None:
    """The newest `up` record of a history that carries a sound time-to-serve ledger, or None."""
    return newest_time_to_serve(history_text)[0]


# an `up` whose time to serve is longer than this is no record of one: a damaged line
MAX_WALL_S = 7 * 24 * 3600.0


def newest_time_to_serve(history_text: str) -> tuple[dict | None, list[str]]:
    """(the newest `up` record with a sound ledger that changed something, else the newest one that changed
    nothing, or None; what is wrong with each newer one that was passed over). Its `passed_over` counts the newer
    `up`s that changed nothing (a re-run after the deploy the user asks about). The history is read from a host:
    anything may have written it, and the timeline draws its numbers."""
    skipped: list[str] = []
    idle: list[dict] = []  # sound records of `up`s that changed nothing, newest first
    lines = history_text.splitlines()
    for number in range(len(lines), 0, -1):
        try:
            record = json.loads(lines[number - 1])
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and record.get("action") == "up" and isinstance(record.get("time_to_serve"), dict):
            problem = ledger_problem(record)
            if problem is not None:
                skipped.append(f"history line {number} of the last {len(lines)}: {problem}")
            elif record.get("changed") is False:
                idle.append(record)
            else:  # one that deployed something (records from before `changed` was kept count as such)
                return {**record, "passed_over": len(idle)}, skipped
    return ({**idle[0], "passed_over": 0} if idle else None), skipped


def ledger_problem(record: dict) -> str | None:
    """What is wrong with an `up` record's time-to-serve ledger (None: nothing): every time a finite number of
    seconds within the wall time, every name a string."""
    import math

    def seconds(value, where: str, most: float) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{where} {str(value)[:40]!r} is not a number of seconds"
        if not 0 <= value <= most:
            return f"{where} {value:g} is outside 0..{most:g} s"
        return None

    ledger = record["time_to_serve"]
    wall = ledger.get("wall_s")
    found = seconds(wall, "wall_s", MAX_WALL_S)
    if found:
        return found
    most = wall * 1.01 + 1.0  # rounding of each part to ms
    phases, hosts = ledger.get("phases", {}), ledger.get("hosts", {})
    if not isinstance(phases, dict) or not isinstance(hosts, dict):
        return "phases or hosts is not a JSON object"
    for name in ("time", "result"):
        if name in record and not isinstance(record[name], str):
            return f"{name} is not a string"
    for phase, value in phases.items():
        found = seconds(value, f"phases.{phase}", most)
        if found:
            return found
    for host, rows in hosts.items():
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            return f"hosts.{host} is not a list of objects"
        for index, row in enumerate(rows):
            where = f"hosts.{host}[{index}]"
            if not isinstance(row.get("phase"), str) or not isinstance(row.get("instance", ""), str):
                return f"{where}: phase or instance is not a string"
            found = seconds(row.get("start_s"), f"{where}.start_s", most) or seconds(
                row.get("seconds"), f"{where}.seconds", most)
            if found:
                return found
    return None
