"""Fixtures for the monitoring pack's tests: a real Prometheus (Debian's package, apt-installed on first use)."""

from __future__ import annotations

import os
import subprocess

import pytest


@pytest.fixture(scope="session")
def prometheus_tools():
    """promtool, prometheus and prometheus-blackbox-exporter on PATH: installed when missing (root), else a skip
    with the reason (a failure with CI=true, as for the test bed)."""
    from tests.monitor.prometheus import PrometheusUnavailable, install

    try:
        install()
    except (PrometheusUnavailable, OSError, subprocess.CalledProcessError) as error:
        said = getattr(error, "stderr", None) or b""
        message = f"Prometheus unavailable: {error} {said.decode(errors='replace')[-500:]}".strip()
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
