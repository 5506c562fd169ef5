"""What MindCluster's npu-exporter writes (pure data), read from its source (github.com/Ascend/mind-cluster,
component/npu-exporter): the port, the per-card metric names the dashboard queries, and their labels."""

from __future__ import annotations

# cmd/npu-exporter/main.go: `portConst = 8082`, the default of its -port flag; it serves /metrics there.
DEFAULT_PORT = 8082
TITLE = "MindCluster npu-exporter"

# collector/common/constants.go + common.go: CardLabel, the labels of every per-card metric.
CARD_LABELS = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")

# collector/metrics/collector_for_npu.go (BaseInfoCollector) and collector_for_hbm.go (HbmCollector).
UTILIZATION = "npu_chip_info_utilization"  # AI core utilisation, %
TEMPERATURE = "npu_chip_info_temperature"  # °C
POWER = "npu_chip_info_power"  # W
HEALTH = "npu_chip_info_health_status"  # 1 healthy
HBM_USED = "npu_chip_info_hbm_used_memory"  # MB
HBM_TOTAL = "npu_chip_info_hbm_total_memory"  # MB
CHIPS = "machine_npu_nums"  # no labels

PER_CARD = (UTILIZATION, TEMPERATURE, POWER, HEALTH, HBM_USED, HBM_TOTAL)
