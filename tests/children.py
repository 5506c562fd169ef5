"""A child `deployctl` (or any command) for tests that signal it or read it while it runs.

Two rules every such test needs, whatever shell started the suite:
- The child can receive Ctrl-C. A suite started as a background job of a non-interactive shell inherits SIGINT
  ignored, and CPython installs its KeyboardInterrupt handler only when SIGINT is not ignored at start
  (Modules/signalmodule.c, signal_install_handlers: only a SIG_DFL handler is replaced), so the child is made
  to start with the default disposition.
- No read of its output is unbounded: both streams are read by threads from the start (a full pipe never stalls
  the child), and every wait for a line or for the end has a timeout that ends in a failed test, not a hung one.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Lines:
    """One stream read line by line in a daemon thread."""

    def __init__(self, stream) -> None:
        self.queue: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        try:
            for line in stream:
                self.queue.put(line)
        finally:
            self.ended.set()
            self.queue.put(None)

    def _take(self, timeout: float) -> Optional[str]:
        line = self.queue.get(timeout=timeout)
        if line is not None:
            self.seen.append(line)
        return line

    def wait_for(self, wanted: str, timeout: float) -> bool:
        """True once a line holding `wanted` was read; False at the end of the stream or after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                line = self._take(left)
            except queue.Empty:
                return False
            if line is None:
                self.queue.put(None)  # the end stays visible to later calls
                return False
            if wanted in line:
                return True

    def text(self, timeout: float) -> str:
        """Everything the stream carried, once it ended (within `timeout` s; what was read so far otherwise)."""
        self.ended.wait(timeout)
        while True:
            try:
                line = self._take(0)
            except queue.Empty:
                break
            if line is None:
                self.queue.put(None)
                break
        return "".join(self.seen)


class Child:
    """A running command whose stdout and stderr are read from the start; every wait on it is bounded."""

    def __init__(self, argv: Sequence[str], env: Optional[dict] = None) -> None:
        self.process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "NO_COLOR": "1", **(env or {})},
                                        preexec_fn=default_sigint)
        self.stdout, self.stderr = _Lines(self.process.stdout), _Lines(self.process.stderr)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> Optional[int]:
        return self.process.poll()

    def interrupt(self) -> None:
        """Ctrl-C, as a terminal sends it to the foreground process."""
        self.process.send_signal(signal.SIGINT)

    def finish(self, timeout: float) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once it exits; killed (and the test failed) after `timeout` s."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
            raise AssertionError(f"{self.process.args[:4]} still ran after {timeout} s; killed. stderr so far:\n"
                                 f"{self.stderr.text(5)}") from None
        return code, self.stdout.text(30), self.stderr.text(30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def deployctl_child(*argv: str, env: Optional[dict] = None) -> Child:
    """`python -m deployctl ARGV...` as a child the test can interrupt and read with bounds."""
    return Child([sys.executable, "-m", "deployctl", *map(str, argv)], env=env)
