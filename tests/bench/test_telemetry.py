"""Telemetry, pure half: the commands a tick runs, the parsers (npu-smi, nvidia-smi's query, Prometheus text)
and a run's summary; the knee explained from it."""

from __future__ import annotations

from pathlib import Path

from deployctl.bench.knee import explain_knee
from deployctl.bench.telemetry import (Device, Engine, Sample, parse_devices, parse_engine, parse_prometheus,
                                       parse_tick, summarize_telemetry, telemetry_commands)
from tests.plan.test_containers import PD, spec as pd_spec

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 4.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 1.0
vllm:num_preemptions_total{engine="0",model_name="tiny"} 7.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} NaN
"""


def test_a_tick_asks_npu_smi_and_each_engines_metrics_not_the_schedulers():
    s = pd_spec(PD)
    argv = [c.argv for c in telemetry_commands(s, "node1")]
    assert argv == [("npu-smi", "info"),
                    ("curl", "--silent", "--fail", "--max-time", "2", "http://127.0.0.1:8088/metrics"),
                    ("curl", "--silent", "--fail", "--max-time", "2", "http://127.0.0.1:8089/metrics")]


def test_npu_smi_rows_and_nvidia_smi_csv_become_devices():
    text = (FORMATS / "npu-smi" / "info-910b3-8x64g-healthy-23.0.6" / "stdout.txt").read_text()
    devices = parse_devices(text, "ascend")
    assert len(devices) == 8 and devices[0] == Device(0, 0.0, 3391.0, 65536.0, 44.0)
    assert parse_devices("0, 87, 40000, 81559, 61\n1, 12, 1000, 81559, 40\n", "gpu") == (
        Device(0, 87.0, 40000.0, 81559.0, 61.0), Device(1, 12.0, 1000.0, 81559.0, 40.0))
    assert parse_devices("dcmi module initialize failed. ret is -8005\n", "ascend") == ()


def test_prometheus_text_keeps_each_label_sets_value_and_skips_nan_and_comments():
    assert parse_prometheus(METRICS) == {"vllm:num_requests_running": [4.0], "vllm:num_requests_waiting": [1.0],
                                         "vllm:kv_cache_usage_perc": [1.0], "vllm:num_preemptions_total": [7.0]}
    assert parse_prometheus(TWO_ENGINES)["vllm:kv_cache_usage_perc"] == [0.6, 0.6]


# An API server with internal DP fronts several engines: vLLM writes one label set per engine index
# (vllm/v1/metrics/loggers.py: labelnames ["model_name", "engine"]).
TWO_ENGINES = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="tiny",engine="0"} 3.0
vllm:num_requests_running{model_name="tiny",engine="1"} 2.0
vllm:num_requests_waiting{model_name="tiny",engine="0"} 1.0
vllm:num_requests_waiting{model_name="tiny",engine="1"} 0.0
vllm:kv_cache_usage_perc{model_name="tiny",engine="0"} 0.6
vllm:kv_cache_usage_perc{model_name="tiny",engine="1"} 0.6
vllm:num_preemptions_total{model_name="tiny",engine="0"} 2.0
vllm:num_preemptions_total{model_name="tiny",engine="1"} 5.0
"""


def test_a_server_with_several_engines_reads_as_its_fullest_engine_and_its_summed_requests():
    engine = parse_engine("tiny-mixed0", TWO_ENGINES)
    # two engines at 60 % KV cache are a server at 60 %, not 120 % ("KV cache full"); requests add up
    assert engine == Engine("tiny-mixed0", running=5.0, waiting=1.0, kv_cache_usage=0.6, preemptions=7.0)
    busy = TWO_ENGINES.replace('engine="1"} 0.6', 'engine="1"} 0.97')
    assert parse_engine("tiny-mixed0", busy).kv_cache_usage == 0.97  # one full engine is what the knee needs


def test_a_tick_parses_into_a_sample_and_an_engine_that_did_not_answer_is_a_gap():
    s = pd_spec(PD)
    npu = (FORMATS / "npu-smi" / "info-910b3-8x64g-healthy-23.0.6" / "stdout.txt").read_text()
    sample = parse_tick(s, "node1", 1.5, [(0, npu), (0, METRICS), (7, "")])
    assert sample.t == 1.5 and [d.device for d in sample.devices] == [4, 5, 6, 7]  # the deployment's cards only
    assert sample.engines == (Engine("llama2-13b-pd-prefill-0", 4.0, 1.0, 1.0, 7.0), Engine("llama2-13b-pd-decode-0"))
    rows = sample.rows(3)
    assert rows[0]["kind"] == "device" and rows[-1] == {"run": 3, "t": 1.5, "host": "node1", "kind": "engine",
                                                        "id": "llama2-13b-pd-decode-0", "running": None,
                                                        "waiting": None, "kv_cache_usage": None, "preemptions": None}


def run_summary(util, kv, preempt_from, preempt_to, waiting=0.0, running=(4.0, 4.0)):
    samples = [Sample(t, "h", (Device(0, util, 30000.0, 65536.0, 50.0),),
                      tuple(Engine(f"e{i}", r, waiting, kv, preempt) for i, r in enumerate(running)))
               for t, preempt in ((0.0, preempt_from), (1.0, preempt_to))]
    return summarize_telemetry(samples)


def test_a_runs_summary_has_the_figures_the_knee_reads():
    summary = run_summary(80.0, 0.97, 3.0, 10.0, waiting=2.0)
    assert summary["samples"] == 2 and summary["device_util_mean_pct"] == 80.0
    assert summary["kv_cache_usage_max"] == 0.97 and summary["preemptions"] == 14.0  # 7 on each engine
    assert summary["device_mem_max_pct"] == 100.0 * 30000 / 65536 and summary["waiting_max"] == 2.0
    assert summary["engines"]["e0"] == {"running_max": 4.0, "waiting_max": 2.0, "kv_cache_usage_max": 0.97,
                                        "preemptions": 7.0}


def bench_doc(*runs):
    out = []
    for load, met, telemetry in runs:
        out.append({"parallel_num": load, "ttft_ms": {"p99": 10.0}, "tpot_ms": {"p50": 5.0},
                    "slo": {"met": met}, "telemetry": telemetry})
    return {"mode": "static", "runs": out}


def test_the_knee_names_a_full_kv_cache_with_its_numbers():
    knee = explain_knee(bench_doc((4, True, run_summary(60, 0.5, 0, 0)), (8, True, run_summary(85, 0.9, 0, 0)),
                                  (16, False, run_summary(90, 1.0, 0, 12, waiting=8))))
    assert knee["load"] == 16 and knee["cause"] == "kv_cache_full"
    assert knee["numbers"] == {"kv_cache_usage_max": 1.0, "preemptions": 24.0, "waiting_max": 8.0}
    assert "KV cache is full (100 %), 24 preemption(s), up to 8 request(s) waiting" in knee["explanation"]


def test_one_saturated_instance_and_flat_devices_and_no_telemetry_are_told_apart():
    lopsided = run_summary(70, 0.6, 0, 0, running=(12.0, 2.0))
    knee = explain_knee(bench_doc((4, True, run_summary(40, 0.3, 0, 0)), (8, False, lopsided)))
    assert knee["cause"] == "one_instance_saturated" and "e0 runs up to 12" in knee["explanation"]
    flat = explain_knee(bench_doc((4, True, run_summary(31, 0.2, 0, 0)), (16, False, run_summary(32, 0.3, 0, 0))))
    assert flat["cause"] == "devices_flat" and "stayed at 31 % -> 32 %" in flat["explanation"]
    bare = explain_knee({"mode": "static", "runs": [{"parallel_num": 1, "slo": {"met": False}}]})
    assert bare["cause"] == "unknown" and "no telemetry" in bare["explanation"]
    assert explain_knee(bench_doc((4, True, None), (8, True, None))) is None


def test_without_slos_the_knee_is_where_latency_bends():
    runs = [{"request_rate": r, "ttft_ms": {"p99": t}, "tpot_ms": {"p50": 5.0}} for r, t in ((1, 10), (2, 11), (4, 40))]
    knee = explain_knee({"mode": "dynamic", "runs": runs})
    assert knee["load"] == 4 and knee["cause"] == "unknown"


def test_telemetry_turns_off_with_a_line_when_a_host_cannot_be_reached():
    from types import SimpleNamespace

    from deployctl.commands.bench import telemetry

    unreachable = PD.replace("node1: {address: 192.0.2.18}", "node1: {address: 127.0.0.1}") + "ssh: {port: 1}\n"
    said = []
    with telemetry(pd_spec(unreachable), 1.0, SimpleNamespace(info=said.append)) as sampler:
        assert sampler is None
    assert len(said) == 1 and said[0].startswith("telemetry off: node1")
    with telemetry(pd_spec(unreachable), 0, SimpleNamespace(info=said.append)) as sampler:  # 0: off, no attempt
        assert sampler is None and len(said) == 1
