"""The whole monitoring pack of a deployment as files (pure): relative path -> text, the same bytes for the same
spec and facts (sorted, no time, no secret: only names, addresses, ports and labels reach it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import yaml

from deployctl.fronts import front_for_role
from deployctl.monitor import queries as jobs
from deployctl.monitor.dashboard import dashboard, dashboard_provisioning, datasource_provisioning
from deployctl.monitor.durations import duration, millis
from deployctl.monitor.queries import Queries
from deployctl.monitor.rules import alert_rules
from deployctl.monitor.targets import Exporters, Target, Targets, build_targets
from deployctl.servers import flavour_of
from deployctl.spec.model import MonitorSpec, Spec

if TYPE_CHECKING:
    from deployctl.fronts.base import RouterMetrics

# Where `monitor.deploy` mounts the pack in the monitoring containers (Grafana's provisioning reads paths there)
MOUNT = "/etc/deployctl-monitoring"
PROMETHEUS_URL = "http://127.0.0.1:9090"  # the containers share the host's network

PROMETHEUS = "prometheus.yml"
RULES = "rules/deployctl.rules.yml"
BLACKBOX = "blackbox.yml"
TARGET_FILES = {"servers": "targets/servers.json", "fronts": "targets/front.json",
                "npu": "targets/npu-exporter.json", "node": "targets/node-exporter.json",
                "router": "targets/router.json"}
NOTES = "NOTES.txt"

__all__ = ["Exporters", "Pack", "render_pack"]


@dataclass(frozen=True)
class Pack:
    files: dict[str, str]  # relative path -> text, in a stable order
    notes: tuple[str, ...]  # what is missing (no exporter on a host ...), also in NOTES.txt
    targets: Targets

    def dashboard_path(self, deployment: str) -> str:
        return f"grafana/dashboards/{deployment}.json"


def _yaml(doc: dict, header: str) -> str:
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100_000,
                                   allow_unicode=True)


def _json(doc) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _targets(targets: tuple[Target, ...]) -> str:
    return _json([t.to_json() for t in targets])


def prometheus_config(monitor: MonitorSpec) -> dict:
    """prometheus.yml: one job per kind of target, each reading its file_sd list (paths relative to this file)."""
    scrape_ms = millis(monitor.scrape_interval)
    interval = duration(scrape_ms)

    def job(name: str, key: str, **extra) -> dict:
        return {"job_name": name, **extra, "file_sd_configs": [{"files": [TARGET_FILES[key]],
                                                                  "refresh_interval": "30s"}]}

    return {
        # Prometheus' own default timeout (10 s), never longer than the interval (it refuses that)
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": duration(min(scrape_ms, 10_000))},
        "rule_files": [RULES],
        "scrape_configs": [
            job(jobs.SERVERS_JOB, "servers"),
            job(jobs.FRONT_JOB, "fronts", metrics_path="/probe", params={"module": ["http_2xx"]},
                relabel_configs=[{"source_labels": ["__address__"], "target_label": "__param_target"},
                                 {"target_label": "__address__", "replacement": monitor.blackbox_exporter}]),
            job(jobs.NPU_JOB, "npu"),
            # the textfile's `host` (and `deployment`) are the scanned container's, not the node_exporter's that
            # serves the file: honour them (else Prometheus renames them `exported_host`; scrape_config's
            # honor_labels, prometheus docs configuration.md)
            job(jobs.NODE_JOB, "node", honor_labels=True),
            # a vllm-router front's own metrics (vllm-project/router src/metrics.rs; any path answers them)
            job(jobs.ROUTER_JOB, "router"),
        ],
    }


def blackbox_config() -> dict:
    """blackbox_exporter's module for the front: GET its health path, 2xx is healthy."""
    return {"modules": {"http_2xx": {"prober": "http", "timeout": "5s",
                                     "http": {"method": "GET", "valid_status_codes": [200],
                                              "preferred_ip_protocol": "ip4"}}}}


def render_pack(spec: Spec, exporters: Optional[Exporters] = None, deployed: bool = True,
                leave_out: frozenset[str] = frozenset()) -> Pack:
    """Every file of the pack. `exporters`: the ports each host listens on (None: not asked); `deployed=False`
    (after `down`): empty target lists and no alert rules, the rest unchanged; `leave_out`: containers not listed
    as targets (while `up` restarts them), the rules unchanged."""
    monitor = spec.monitor or MonitorSpec()
    flavour = flavour_of(spec)
    q = Queries.of(spec.name, flavour.metrics, monitor.scrape_interval)
    targets = build_targets(spec, exporters, deployed, leave_out)
    header = (f"# deployctl monitor: {spec.name} ({flavour.title}); written by `deployctl monitor` and every "
              "`up`/`down` — edits are overwritten\n")
    npu = flavour.platform == "ascend" and bool(monitor.npu_exporter_port)
    files = {
        PROMETHEUS: _yaml(prometheus_config(monitor), header),
        RULES: _yaml(alert_rules(q, monitor.blackbox_exporter, monitor.ttft_p99, deployed), header + f"# metric names: {flavour.metrics.source}\n"),
        BLACKBOX: _yaml(blackbox_config(), header),
        TARGET_FILES["servers"]: _targets(targets.servers),
        TARGET_FILES["fronts"]: _targets(targets.fronts),
        TARGET_FILES["npu"]: _targets(targets.npu),
        TARGET_FILES["node"]: _targets(targets.node),
        TARGET_FILES["router"]: _targets(targets.router),
        "grafana/provisioning/datasources/deployctl.yaml": _yaml(datasource_provisioning(PROMETHEUS_URL), header),
        "grafana/provisioning/dashboards/deployctl.yaml": _yaml(dashboard_provisioning(f"{MOUNT}/grafana/dashboards"),
                                                               header),
        f"grafana/dashboards/{spec.name}.json": _json(dashboard(q, f"deployctl: {spec.name}", npu,
                                                               spec.mode == "disaggregated",
                                                               router=_front_metrics(spec))),
        NOTES: header.lstrip("# ") + "".join(f"- {note}\n" for note in targets.notes),
    }
    return Pack(files, targets.notes, targets)


def _front_metrics(spec: Spec) -> Optional["RouterMetrics"]:
    """The names of a front's own metrics where it serves them (a router's metrics port): the dashboard's router
    panels draw them."""
    return next((kind.metrics for i in spec.instances for kind in [front_for_role(i.role)]
                 if kind and kind.metrics_port(i)), None)
