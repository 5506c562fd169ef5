"""vLLM's graceful stop (pure): `--shutdown-timeout T` where the server's vLLM has it (vLLM #34730, reverted by
#36628, re-added by #36666; first released in v0.18.0). On SIGTERM — `docker stop --time T` — vLLM then lets the
requests in flight run up to T seconds before it aborts the rest (0.33.0 vllm/v1/engine/core.py:1709-1737,
vllm/entrypoints/launchers/launcher.py:264-280); without it (the default 0) it aborts every one at once, so a
drain's graceful stop would fail what was still running. Older vLLMs have no such flag: argparse exits 2.

The one stop policy: every stop of a server (`up`'s replace and retire, rollout waves, surge servers, `watch`'s
restart, `down`, the exports' grace period) takes its grace from `stop_grace` here, at least the server's own
--shutdown-timeout, and `up`, `watch` and `down` write the command with `stop_command`."""

from __future__ import annotations

from typing import Optional, Sequence

from deployctl.core import Command, flag_value
from deployctl.servers.fields import Flag

FLAG = "--shutdown-timeout"
DEFAULT_SHUTDOWN_TIMEOUT = 30  # seconds `docker stop` gives a server to finish before SIGKILL (--shutdown-timeout)
# the field tables' row: rendered after the flavour's own flags, before the user's extra args
ROW = Flag("@shutdown_timeout", FLAG)


def shutdown_timeout(supported: bool, extra_args: Sequence[str]) -> Optional[int]:
    """The seconds to render (None: none): `docker stop --time`'s default (DEFAULT_SHUTDOWN_TIMEOUT), so vLLM
    drains as long as docker waits; nothing where the server's vLLM lacks the flag or the user's extra args set it."""
    if not supported or any(word.split("=", 1)[0] == FLAG for word in extra_args):
        return None
    return DEFAULT_SHUTDOWN_TIMEOUT


def stop_grace(words: Sequence[str], floor: Optional[int] = None) -> int:
    """Seconds `docker stop --time` gives a server whose command (or extra args) is `words`: `floor` (deployctl's
    --shutdown-timeout flag; None: DEFAULT_SHUTDOWN_TIMEOUT), or the server's own --shutdown-timeout where that is
    longer: docker's SIGKILL would cut its drain short."""
    floor = DEFAULT_SHUTDOWN_TIMEOUT if floor is None else floor
    own = flag_value(words, (FLAG,))
    return max(floor, int(own)) if own is not None and own.isdigit() else floor


def stop_command(name: str, words: Sequence[str] = (), floor: Optional[int] = None) -> Command:
    """`docker stop --time GRACE NAME` for the server whose command (or, where the rendered command is not at hand,
    extra args: the flavour renders DEFAULT_SHUTDOWN_TIMEOUT or nothing, below any floor) is `words`."""
    return Command(("docker", "stop", "--time", str(stop_grace(words, floor)), name))
