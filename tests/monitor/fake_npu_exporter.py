"""A fake MindCluster npu-exporter for the test bed: GET /metrics answers the real exporter's per-card metric
names, help texts and labels, with each card's values read (at every scrape) from the host's fake npu-smi
profile, the same numbers `npu-smi info` shows there (tests/testbed/fakes.py card_stats).

What it imitates, from github.com/Ascend/mind-cluster component/npu-exporter: the port (cmd/npu-exporter/main.go
`portConst = 8082`, served at /metrics), the card labels (collector/common/common.go CardLabel with the names of
collector/common/constants.go: id, model_name, vdie_id, pcie_bus_info, namespace, pod_name, container_name), the
base metrics (collector/metrics/collector_for_npu.go: npu_chip_info_utilization, _temperature, _power,
_health_status, machine_npu_nums) and HBM (collector_for_hbm.go: npu_chip_info_hbm_used_memory, _total_memory,
in MB). Only these are emulated.

Run inside a host's network namespace: `python3 fake_npu_exporter.py ADDRESS PORT PROFILE_JSON`."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.testbed.fakes import bus_id, card_ids, card_stats, with_defaults  # noqa: E402

LABELS = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
METRICS = (  # (name, help as the exporter writes it, the card_stats key or a function of the profile)
    ("npu_chip_info_utilization", "the ai core utilization", "aicore"),
    ("npu_chip_info_temperature", "the npu temperature", "temp"),
    ("npu_chip_info_power", "the npu power", "power"),
    ("npu_chip_info_health_status", "the npu health status", "health"),
    ("npu_chip_info_hbm_used_memory", "the npu hbm used memory", "hbm_used"),
    ("npu_chip_info_hbm_total_memory", "the npu hbm total memory", "hbm_total"),
)


def render(profile: dict) -> str:
    profile = with_defaults(profile)
    cards = card_ids(profile)
    lines = ["# HELP machine_npu_nums Amount of npu installed on the machine.", "# TYPE machine_npu_nums gauge",
             f"machine_npu_nums {len(cards)}"]
    for name, help_text, key in METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for card in cards:
            stats = dict(card_stats(profile, card))
            stats["hbm_total"] = profile["hbm_mb"]
            health = (profile.get("health") or {}).get(str(card), "OK")
            stats["health"] = 1 if health == "OK" else 0  # getHealthCode: Healthy 1
            values = (str(card), f"Ascend{profile['chip']}", "", bus_id(card), "", "", "")
            labels = ",".join(f'{label}="{value}"' for label, value in zip(LABELS, values))
            lines.append(f"{name}{{{labels}}} {float(stats[key])}")
    return "\n".join(lines) + "\n"


def main(address: str, port: int, profile_path: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = render(json.loads(Path(profile_path).read_text())).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer((address, port), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
