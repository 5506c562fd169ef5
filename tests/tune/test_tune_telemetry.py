"""A tune record's NPU/GPU telemetry, from what bench's sampler parses (nvidia-smi's CSV query here; npu-smi reads
into the same Device) and summarises per run: utilisation mean over the bench and peaks, and the figures at the
highest load that met the SLOs."""

from __future__ import annotations

from deployctl.bench.telemetry import Sample, parse_devices, summarize_telemetry
from deployctl.tune.result import failed, measured
from tests.tune.test_tune_core import bench

# `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu --format=csv,noheader,nounits`
QUIET = ("0, 80, 40000, 80000, 60\n1, 90, 20000, 80000, 58\n", "0, 70, 41000, 80000, 61\n1, 80, 21000, 80000, 59\n")
BUSY = ("0, 100, 60000, 80000, 70\n1, 100, 60000, 80000, 72\n",) * 2


def run_telemetry(ticks) -> dict:
    return summarize_telemetry([Sample(float(t), "n1", parse_devices(text, "gpu")) for t, text in enumerate(ticks)])


def test_a_measured_record_carries_its_devices_telemetry_over_the_bench_and_at_its_best_load():
    document = bench(4, 8)
    document["runs"][0]["telemetry"] = run_telemetry(QUIET)  # load 4 met the SLOs
    document["runs"][1]["telemetry"] = run_telemetry(BUSY)  # load 8 did not
    record = measured({}, "a", 2, "r", document, 1.0)
    assert record["telemetry"] == {
        "samples": 4,
        "device_util_mean_pct": 90.0,  # (80 + 90 + 70 + 80) / 4 and 100 on both runs of two ticks each
        "device_util_max_pct": 100.0, "device_mem_max_pct": 75.0, "device_temp_max_c": 72.0,
        "kv_cache_usage_max": None,  # no engine answered /metrics in these ticks
        "at_max_load": {"device_util_mean_pct": 80.0, "device_mem_max_pct": 100.0 * 41000 / 80000,
                        "kv_cache_usage_max": None},
    }


def test_no_telemetry_when_nothing_was_sampled_or_the_candidate_failed():
    assert measured({}, "a", 2, "r", bench(4, 8), 1.0)["telemetry"] is None  # --telemetry-interval 0
    silent = bench(4, None)
    silent["runs"][0]["telemetry"] = summarize_telemetry([])
    assert measured({}, "a", 2, "r", silent, 1.0)["telemetry"] is None
    assert failed({}, "b", 2, "r", "exited while starting")["telemetry"] is None


def test_the_table_shows_each_candidates_card_utilisation_and_peak_memory(monkeypatch, capsys):
    from deployctl.ui import UI
    from deployctl.ui.tune import render_tune

    monkeypatch.setenv("COLUMNS", "400")
    document = bench(4, 8)
    document["runs"][0]["telemetry"] = run_telemetry(QUIET)
    document["runs"][1]["telemetry"] = run_telemetry(BUSY)
    records = [measured({}, "a", 2, "r", document, 1.0), failed({}, "b", 2, "r", "exited while starting")]
    render_tune(UI(output="table"), {
        "slo": {"ttft_p99": 300.0}, "deployment": "d", "by": "concurrency", "candidates": records, "pruned": [],
        "pruned_count": 0, "stopped": "done", "winner": "a", "tuned_spec": "t.yaml", "deployed": "a",
        "results_dir": "r"})
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "card util/mem %" in line)
    first, second = [line.split("│")[1:-1] for line in lines if line.startswith("│")]
    column = [cell.strip() for cell in header.split(header[0])[1:-1]].index("card util/mem %")
    assert (first[column].strip(), second[column].strip()) == ("90/75", "-/-"), lines
