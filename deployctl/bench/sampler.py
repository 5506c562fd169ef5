"""Samples every host of the benched deployment while a run goes: once per interval, one round trip per host
(all hosts at once) through the SSH connections already open, on its own thread so the load never waits for it.
A tick that fails on a host is a gap in that host's series, never a failed bench."""

from __future__ import annotations

import threading
import time
from typing import Mapping, Optional

from deployctl.batch import run_batch
from deployctl.bench.telemetry import Sample, parse_tick, telemetry_commands
from deployctl.errors import DeployctlError
from deployctl.fanout import on_hosts
from deployctl.spec.model import Spec
from deployctl.transport import Transport

TICK_TIMEOUT_S = 10.0


class TelemetrySampler:
    def __init__(self, spec: Spec, transports: Mapping[str, Transport], interval: float = 1.0) -> None:
        self.spec = spec
        self.transports = {h.name: transports[h.name] for h in spec.used_hosts if h.name in transports}
        self.commands = {name: telemetry_commands(spec, name) for name in self.transports}
        self.interval = interval
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._samples: list[Sample] = []
        self._started = 0.0

    def start_run(self) -> None:
        """Sample now and then every interval, until end_run."""
        self._samples, self._started = [], time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()

    def end_run(self) -> list[Sample]:
        """Stop, take one last sample (a counter's change needs both ends of the run) and return them all."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._tick()
        return sorted(self._samples, key=lambda s: (s.t, s.host))

    def _loop(self) -> None:
        while True:
            began = time.monotonic()
            self._tick()
            if self._stop.wait(max(0.0, self.interval - (time.monotonic() - began))):
                return

    def _tick(self) -> None:
        t = time.monotonic() - self._started
        found = on_hosts(self.transports, lambda transport: self._sample(transport, t))
        self._samples.extend(sample for sample in found.values() if sample is not None)

    def _sample(self, transport: Transport, t: float) -> Optional[Sample]:
        try:
            results = run_batch(transport, self.commands[transport.name], timeout=TICK_TIMEOUT_S)
        except (DeployctlError, OSError):
            return None
        return parse_tick(self.spec, transport.name, t, [(r.exit_code, r.stdout) for r in results])
