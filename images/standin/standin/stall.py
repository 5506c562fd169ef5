"""The stall modes: an engine that stops making progress while its API server still answers.

- **hang** (`STANDIN_HANG_AFTER_REQUESTS`, or `POST /standin/stall {"mode": "hang"}`): the engine core's loop is
  stuck (an HCCL collective that never returns, vllm-ascend PR #14240; an EngineCore deadlock, vllm #39863): the
  API server accepts every request and queues it, nothing is scheduled or generated, tokens in flight stop, and
  `/health` stays 200 (vLLM 0.33's `/health` only asks `check_health`, which raises only once `errored` is set:
  vllm/entrypoints/serve/instrumentator/health.py:22-33, vllm/v1/engine/async_llm.py:1129-1134). `/metrics` goes
  on answering: `vllm:num_requests_waiting` grows, `vllm:num_requests_running` stays where it was and
  `vllm:generation_tokens_total` stops (#39863's "Running: 0 reqs, Waiting: 3 reqs", generation throughput 0).
- **engine-dead** (`STANDIN_ENGINE_DEAD_AFTER_REQUESTS`, or `POST /standin/stall {"mode": "engine-dead"}`): the
  engine core process died and the client saw it (vLLM 0.33 `MPClient.start_engine_core_monitor` sets
  `engine_dead`, vllm/v1/engine/core_client.py:832-846): `/health` answers 503 (EngineDeadError), a generate 500
  with `EngineDeadError.CLIENT_MESSAGE` (vllm/v1/engine/exceptions.py:19-22; error_response.py maps it to
  InternalServerError), requests in flight end with an error, `/metrics` still answers with the values it had
  (the API server's Prometheus registry is in its own process; nothing updates it any more). The API server then
  exits within the watchdog's 5 s (vllm/entrypoints/launchers/launcher.py:314-337, exit status 0 as uvicorn's
  shutdown returns) unless `VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1` keeps it answering (vllm/envs.py:1106-1110).

A hang may be limited to one engine (`"engine": "R"`: one DP rank of an internal launch); engine death ends every
engine behind the API server, as one dead core marks the whole client dead."""

from __future__ import annotations

import asyncio
from typing import Callable, Iterable, Optional, Tuple

MODES = ("hang", "engine-dead")
CLIENT_MESSAGE = "The server had an error while processing your request."  # EngineDeadError.CLIENT_MESSAGE
WATCHDOG_S = 5.0  # VLLM_WATCHDOG_TIME_S in vllm/entrypoints/launchers/launcher.py (0.33.0)


class EngineDied(Exception):
    """The engine core died while a request waited or generated."""


def death_line(vllm_version: Optional[str]) -> str:
    """What the API server logs when an engine core exits: vLLM 0.33's monitor thread
    (vllm/v1/engine/core_client.py:840); older releases logged `Engine core proc ... died unexpectedly`."""
    if vllm_version and tuple(int(p) for p in vllm_version.split(".")[:2]) >= (0, 33):
        return "WARNING [core_client.py:840] [shutdown] MPClient: engine core exited unexpectedly; starting cleanup"
    return "ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."


class EngineStall:
    """One engine's progress gate: open while it generates, closed while it hangs."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self.stuck = 0  # requests accepted while it hangs: queued, never scheduled (they count as waiting)

    @property
    def hung(self) -> bool:
        return not self._open.is_set()

    def hang(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def progress(self) -> None:
        """Return at once while the engine runs; wait (a token in flight stops) while it hangs."""
        if not self._open.is_set():
            await self._open.wait()

    async def queue(self) -> None:
        """A request that arrived while the engine hangs waits here, counted as waiting, until it resumes."""
        self.stuck += 1
        try:
            await self._open.wait()
        finally:
            self.stuck -= 1


class Stalls:
    """The stall state of one API server: each engine's gate (engine index -> its EngineStall), and whether the
    engine core died."""

    def __init__(self, engines: Iterable[Tuple[str, EngineStall]]) -> None:
        self.engines = dict(engines)
        self.dead = False
        self.on_death: Optional[Callable[[], None]] = None  # the server logs, freezes /metrics, plans its exit

    def hang(self, engine: Optional[str] = None) -> list[str]:
        """Hang one engine (an index) or all; returns which."""
        chosen = [engine] if engine is not None else list(self.engines)
        for index in chosen:
            self.engines[index].hang()
        return chosen

    def resume(self) -> None:
        for stall in self.engines.values():
            stall.resume()

    def die(self) -> None:
        """The engine core dies: every gate opens so waiting tasks wake, see `dead` and answer with the error."""
        if self.dead:
            return
        self.dead = True
        if self.on_death is not None:
            self.on_death()
        self.resume()

    def describe(self) -> dict:
        return {"dead": self.dead, "hung": sorted(i for i, s in self.engines.items() if s.hung)}
