"""A real Prometheus for the tests: Debian's `prometheus` (with promtool) and `prometheus-blackbox-exporter`,
apt-installed on first use as the test bed installs docker.io, started on 127.0.0.1 with a generated config, and
asked through its HTTP API (waits poll a condition with a deadline, never sleep for time to pass)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Optional

from tests.ports import free_port

APT_PACKAGES = ("prometheus", "prometheus-blackbox-exporter")
BINARIES = ("prometheus", "promtool", "prometheus-blackbox-exporter")


class PrometheusUnavailable(RuntimeError):
    """Prometheus cannot be installed or run here; the message says why."""


def missing() -> list[str]:
    return [b for b in BINARIES if not shutil.which(b)]


def install() -> None:
    """apt-get the Debian packages when a binary is missing (a fresh CI machine); root only."""
    if not missing():
        return
    if os.geteuid() != 0:
        raise PrometheusUnavailable(f"{', '.join(missing())} missing and not root to apt-get {' '.join(APT_PACKAGES)}")
    if not shutil.which("apt-get"):
        raise PrometheusUnavailable(f"{', '.join(missing())} missing and no apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES], check=True, env=env,
                   capture_output=True)
    if missing():
        raise PrometheusUnavailable(f"still missing after apt-get install: {', '.join(missing())}")


def promtool(*args: str, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True, timeout=60)


def _get(url: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # 127.0.0.1 only
        return json.loads(response.read())


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30.0, every: float = 0.1):
    """Poll `condition` until it returns something truthy (returned); AssertionError naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = condition()
        except (OSError, ValueError) as exc:  # not listening yet, a half-written answer
            last = exc
        if last and not isinstance(last, Exception):
            return last
        assert time.monotonic() < deadline, f"timed out waiting for {what}: last {last!r}"
        time.sleep(every)  # a poll interval, not a wait for time to pass


def iso_seconds(text: str) -> float:
    """Prometheus' RFC 3339 time (nanoseconds) as Unix seconds."""
    from datetime import datetime

    whole, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (fraction or "0"))


class Process:
    """A server process with its log in a file, stopped (TERM, then KILL) by stop()."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


class Prometheus(Process):
    """`prometheus --config.file=CONFIG` on 127.0.0.1:<free port>, its data in `data`."""

    def __init__(self, config: Path, data: Path, port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
                          f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
                          "--log.level=warn"], data.parent / f"prometheus-{self.port}.log")
        wait_until(lambda: self._ready(), "Prometheus to be ready")

    def _ready(self) -> bool:
        assert self.proc.poll() is None, f"prometheus exited: {self.log()}"
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return response.status == 200

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params)
        doc = _get(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else ""))
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def targets(self) -> list:
        return self.api("targets", state="active")["activeTargets"]

    def alerts(self) -> list:
        return self.api("alerts")["alerts"]

    def last_evaluation(self, group: str) -> Optional[float]:
        """When Prometheus last evaluated the rule group (Unix seconds); None before the first evaluation."""
        for found in self.api("rules")["groups"]:
            if found["name"] == group and not found["lastEvaluation"].startswith("0001-"):
                return iso_seconds(found["lastEvaluation"])
        return None

    def reload(self) -> None:
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


class Blackbox(Process):
    """prometheus-blackbox-exporter with the pack's blackbox.yml on 127.0.0.1:<free port>."""

    def __init__(self, config: Path, log_dir: Path, port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        super().__init__(["prometheus-blackbox-exporter", f"--config.file={config}",
                          f"--web.listen-address={self.address}"], log_dir / f"blackbox-{self.port}.log")

        def ready() -> bool:
            assert self.proc.poll() is None, f"blackbox exporter exited: {self.log()}"
            with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=2) as response:
                return response.status == 200

        wait_until(ready, "blackbox_exporter to be ready")
