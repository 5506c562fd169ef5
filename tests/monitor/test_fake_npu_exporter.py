"""The fake npu-exporter prints what deployctl's dashboard queries (deployctl/monitor/npu_exporter.py, read from
MindCluster's source) with the real card labels, and each card's numbers are the fake npu-smi's for that host."""

from __future__ import annotations

from deployctl.monitor import npu_exporter
from tests.monitor.fake_npu_exporter import render
from tests.monitor.prometheus import promtool


def test_it_prints_every_per_card_metric_the_pack_reads_with_the_card_labels():
    text = render({"cards": 2, "chip": "910B3", "hbm_mb": 65536,
                   "stats": {"1": {"aicore": 85, "hbm_used": 60000, "temp": 71, "power": 310.5}}})
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    for name in npu_exporter.PER_CARD:
        rows = [line for line in samples if line.startswith(name + "{")]
        assert len(rows) == 2, name
        for row in rows:
            labels = [pair.split("=")[0] for pair in row[row.index("{") + 1:row.index("}")].split(",")]
            assert tuple(labels) == npu_exporter.CARD_LABELS
    assert 'npu_chip_info_utilization{id="1",model_name="Ascend910B3"' in text
    values = {line.split("{")[0]: line.rsplit(" ", 1)[1] for line in samples if 'id="1"' in line}
    assert values == {npu_exporter.UTILIZATION: "85.0", npu_exporter.HBM_USED: "60000.0", npu_exporter.TEMPERATURE:
                      "71.0", npu_exporter.POWER: "310.5", npu_exporter.HBM_TOTAL: "65536.0", npu_exporter.HEALTH: "1.0"}
    assert f"{npu_exporter.CHIPS} 2" in text


def test_promtool_reads_it(prometheus_tools):
    lint = promtool("check", "metrics", stdin=render({}))
    assert lint.returncode == 0, lint.stdout + lint.stderr
