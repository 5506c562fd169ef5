"""A graceful stop on SIGTERM, as the emulated server does it: which connections and requests are waited for, which
are refused or aborted, and for how long.

Two behaviours, by what upstream runs:
- `uvicorn` (vLLM before 0.18, the vendor image's launchers, vllm-ascend's proxy, which is `uvicorn.run(app)`): the
  SIGTERM handler cancels the server task and returns uvicorn's `Server.shutdown()` (vLLM's
  vllm/entrypoints/launcher.py `serve_http` before vllm #34730). uvicorn 0.54 `Server.shutdown`
  (uvicorn/server.py:281-311) closes the listening sockets (a new connection is refused), closes every connection
  not inside a request (h11_impl.py:336-345 `shutdown`: no cycle or the response complete) and lets one inside a
  request finish its response, then closes it (keep_alive = False); it waits for them with
  `timeout_graceful_shutdown`, which vLLM never sets (None: for ever; `docker stop -t N`'s SIGKILL ends it).
- `vllm` (vLLM >= 0.18, `--shutdown-timeout T`, vllm #34730/#36666; read in 0.33.0): the API server stops the engine
  client first and the HTTP server after (vllm/entrypoints/launchers/launcher.py:264-289). T = 0 (the default):
  every request in flight is aborted at once (v1/engine/core.py:1718-1728, finish_reason "abort"). T > 0: requests
  in flight run on for up to T seconds (core.py:1729-1737; the process manager kills the engine at T,
  v1/utils.py:605-660), while the listener stays open and every new generation request fails: AsyncLLM.shutdown
  shuts the renderer's tokenizer pool down first (v1/engine/async_llm.py:305-313, renderers/base.py:144-145,
  :427-433), so tokenizing raises RuntimeError("cannot schedule new futures after shutdown"), answered 500 by the
  app's catch-all handler (entrypoints/serve/exception_handling/register.py:42, error_response.py: a RuntimeError
  is an InternalServerError). /health stays 200 meanwhile (the engine is not dead). Then uvicorn's shutdown as above.
  vLLM's own test accepts a 503, a 500 or a closed connection for such a request
  (tests/entrypoints/launchers/test_shutdown.py, test_wait_timeout_completes_requests).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable, Dict, Optional

from standin.httpio import serve_keep_alive

POLL_S = 0.1  # uvicorn polls its connection set this often while it waits (server.py:318-319)
DRAIN_ERROR = "cannot schedule new futures after shutdown"  # what tokenizing raises once the renderer shut down


@dataclass(frozen=True)
class StopPolicy:
    kind: str  # "uvicorn" | "vllm"
    shutdown_timeout: int = 0  # vLLM's --shutdown-timeout (kind "vllm")
    second_signal_forces: bool = False  # uvicorn.run's own handler: a second signal skips the waiting

    def describe(self) -> str:
        if self.kind == "uvicorn":
            return "uvicorn's graceful shutdown: no new connections, requests in flight finish"
        mode = "abort" if self.shutdown_timeout == 0 else "drain"
        return f"vLLM's shutdown mode={mode} timeout={self.shutdown_timeout}s"


class Connections:
    """The server's open HTTP connections, each inside a request or idle, so a stop can close them as uvicorn does."""

    def __init__(self) -> None:
        self.closing = False
        self._open: Dict[asyncio.StreamWriter, "_Conn"] = {}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    handle: Callable[..., Awaitable[None]], error_key: str) -> None:
        """serve_keep_alive, tracked; after a stop began, a connection closes once its response is complete."""
        conn = _Conn(reader, writer, asyncio.current_task())
        self._open[writer] = conn

        async def tracked(req, w) -> None:
            conn.busy = True
            try:
                await handle(req, w)
            finally:
                conn.busy = False

        try:
            await serve_keep_alive(reader, writer, tracked, error_key, lambda: self.closing)
        except asyncio.CancelledError:
            # A connection task cancelled by asyncio.run's clean-up must end normally: Python 3.11's
            # StreamReaderProtocol done-callback calls task.exception() on it (asyncio/streams.py:248-256 in
            # 3.11.7), which raises CancelledError and prints a traceback after "shutting down".
            writer.close()
        finally:
            self._open.pop(writer, None)

    def busy(self) -> int:
        """Connections inside a request."""
        return sum(1 for conn in self._open.values() if conn.busy)

    def close_idle(self) -> None:
        """Close every connection not inside a request (its reader sees EOF and its task ends)."""
        self.closing = True
        for writer, conn in list(self._open.items()):
            if not conn.busy:
                writer.close()

    def drop_departed(self) -> None:
        """A request whose client went away is not waited for: vLLM cancels a request handler when its client
        disconnects (`with_cancellation`, 0.33.0 vllm/entrypoints/serve/utils/api_utils.py:68), and uvicorn
        forgets a lost connection."""
        for conn in list(self._open.values()):
            if conn.busy and conn.reader.at_eof() and conn.task is not None:
                conn.task.cancel()

    async def wait_closed(self, force: Optional[asyncio.Event] = None) -> None:
        """Until every connection has closed (uvicorn's `_wait_tasks_to_complete`, without a timeout)."""
        while self._open and not (force is not None and force.is_set()):
            self.drop_departed()
            await asyncio.sleep(POLL_S)


class _Conn:
    def __init__(self, reader, writer, task) -> None:
        self.reader, self.writer, self.task = reader, writer, task
        self.busy = False


class Stopper:
    """SIGTERM/SIGINT while serving: the first starts the stop, a second forces it where the policy says so."""

    def __init__(self, policy: StopPolicy) -> None:
        self.policy = policy
        self.requested = asyncio.Event()
        self.forced = asyncio.Event()

    def signal(self) -> None:
        if self.requested.is_set():
            if self.policy.second_signal_forces:
                self.forced.set()
            return
        self.requested.set()


async def stop_gracefully(server: asyncio.AbstractServer, connections: Connections, stopper: Stopper,
                          log, engine=None, app=None) -> None:
    """Run the policy's stop once `stopper.requested` is set. `engine`/`app` (kind "vllm"): the engine whose
    requests in flight are drained or aborted, and the app that refuses new ones meanwhile."""
    policy = stopper.policy
    log(f"SIGTERM: stopping ({policy.describe()})")
    if policy.kind == "vllm" and engine is not None:
        if app is not None:
            app.draining = True
        timeout = policy.shutdown_timeout
        running = engine.in_flight()
        if timeout == 0:
            if running:
                log(f"[shutdown] EngineCore: aborting in-flight requests count={running}")
            engine.abort_all()
        else:
            if running:
                log(f"[shutdown] EngineCore: draining in-flight requests count={running} timeout={timeout}s")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while engine.in_flight() and loop.time() < deadline and not stopper.forced.is_set():
                await asyncio.sleep(min(POLL_S / 10, max(0.0, deadline - loop.time())))
            left = engine.in_flight()
            if left:
                log(f"[shutdown] drain timed out after {timeout}s: aborting {left} request(s) still in flight")
                engine.abort_all()
        log("[shutdown] EngineCore: request processing complete")
    server.close()  # no new connections
    connections.close_idle()
    busy = connections.busy()
    if busy:
        log(f"waiting for {busy} connection(s) to close")
    await connections.wait_closed(stopper.forced)
