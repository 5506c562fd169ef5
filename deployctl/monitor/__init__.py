"""The monitoring pack (pure): Prometheus file_sd targets, prometheus.yml, alert rules and a Grafana dashboard for a
deployment, each a function of the spec (and what the hosts said about their exporters). `commands/monitor.py`
writes them."""

from deployctl.monitor.pack import Exporters, Pack, render_pack

__all__ = ["Exporters", "Pack", "render_pack"]
