"""The monitoring pack (pure): Prometheus file_sd targets, prometheus.yml, alert rules and a Grafana dashboard for a
deployment, each a function of the spec (and what the hosts said about their exporters). `commands/monitor.py`
writes them."""

__all__ = ["Exporters", "Pack", "render_pack"]


def __getattr__(name: str):
    # the pack on first use: `validate` reads only monitor/durations.py, and the pack's modules cost its start-up
    if name in __all__:
        from deployctl.monitor import pack

        return getattr(pack, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
