"""Result documents and files: the `bench` JSON, the flattened CSV, the PNG charts and the terminal table."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Optional

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")


def run_key(mode: str) -> str:
    return "parallel_num" if mode == "static" else "request_rate"


def flatten(run: dict) -> dict:
    """One CSV row: nested summaries become `ttft_ms_p99` and so on; the errors tally is one JSON cell."""
    row = {}
    for key, value in run.items():
        if isinstance(value, dict) and key in LATENCIES:
            for stat, figure in value.items():
                row[f"{key}_{stat}"] = figure
        elif key == "telemetry_samples":  # every tick: bench_<mode>_telemetry.csv
            continue
        elif key == "telemetry":  # the run's summary; per engine as JSON
            for name, figure in value.items():
                row[f"telemetry_{name}"] = json.dumps(figure, sort_keys=True) if isinstance(figure, dict) else figure
        elif key == "slo":  # the goodput figures as columns of their own, the limits and misses as JSON
            row["slo_met"] = value["met"]
            for name in ("good_requests", "goodput_share", "goodput_request_throughput",
                         "goodput_output_token_throughput"):
                row[name] = value[name]
            row["slo_limits_ms"] = json.dumps(value["limits_ms"], sort_keys=True)
            row["slo_violations"] = json.dumps(value["violations"], sort_keys=True)
        elif isinstance(value, dict):
            row[key] = json.dumps(value, sort_keys=True)
        else:
            row[key] = value
    return row


def csv_text(document: dict) -> str:
    return rows_csv([flatten(run) for run in document["runs"]])


def rows_csv(rows: list[dict]) -> str:
    """Rows of differing keys as one CSV: the columns in first-seen order."""
    columns: list[str] = []
    for row in rows:
        columns.extend(c for c in row if c not in columns)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def write_results(document: dict, result_dir: str) -> tuple[list[Path], Optional[str]]:
    """bench_<mode>.json, .csv and .png (mode: static, dynamic or search, the command's); returns the files
    written and a note when the PNG was skipped."""
    folder = Path(result_dir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    # a search's runs are static or dynamic ones (its document's mode, which baselines match on); its files are
    # named after the command, as --result-dir's help and the contract say
    mode = "search" if document.get("search") else document["mode"]
    json_path = folder / f"bench_{mode}.json"
    json_path.write_text(json.dumps(document, indent=2) + "\n")
    csv_path = folder / f"bench_{mode}.csv"
    csv_path.write_text(csv_text(document))
    written = [json_path, csv_path]
    samples = [row for run in document["runs"] for row in run.get("telemetry_samples", ())]
    if samples:
        telemetry_path = folder / f"bench_{mode}_telemetry.csv"
        telemetry_path.write_text(rows_csv(samples))
        written.append(telemetry_path)
    png_path = folder / f"bench_{mode}.png"
    note = write_png(document, png_path)
    if note is None:
        written.append(png_path)
    return written, note


def write_png(document: dict, path: Path) -> Optional[str]:
    """Latency percentiles against load, and output throughput against latency; None when written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no PNG chart (pip install 'deployctl[bench]')"
    key = run_key(document["mode"])
    runs = sorted(document["runs"], key=lambda r: r[key])  # a search ran them in its own order
    telemetry = [run for run in runs if run.get("telemetry", {}).get("samples")]
    fig, axes = plt.subplots(1, 3 if telemetry else 2, figsize=(19 if telemetry else 13, 5))
    left, right = axes[0], axes[1]
    groups: dict = {}
    for run in runs:
        groups.setdefault((run["prompt_tokens"], run["output_tokens"]), []).append(run)
    for (prompt, output), group in groups.items():
        xs = [run[key] for run in group]
        for metric, style in (("ttft_ms", "-"), ("tpot_ms", "--"), ("e2el_ms", ":")):
            for stat, marker in (("p50", "o"), ("p99", "^")):
                ys = [run[metric][stat] for run in group]
                if any(y is not None for y in ys):
                    left.plot(xs, [y if y is not None else float("nan") for y in ys], style, marker=marker,
                              label=f"{metric[:-3].upper()} {stat} ({prompt}/{output})")
        right.plot([run["e2el_ms"]["p50"] or float("nan") for run in group],
                   [run["output_token_throughput"] for run in group], "-o", label=f"{prompt}/{output}")
        for run in group:
            if run["e2el_ms"]["p50"] is not None:
                right.annotate(str(run[key]), (run["e2el_ms"]["p50"], run["output_token_throughput"]), fontsize=8)
    left.set_xlabel("concurrency" if key == "parallel_num" else "request rate (req/s)")
    left.set_ylabel("latency (ms)")
    left.set_yscale("log")
    left.set_title("latency percentiles")
    left.legend(fontsize=7)
    if telemetry:
        _telemetry_axes(axes[2], telemetry, key)
    knee = document.get("knee")
    if knee:
        left.axvline(knee["load"], color="red", linestyle="--", linewidth=1)
        left.annotate(knee["cause"], (knee["load"], 0.02), xycoords=("data", "axes fraction"), color="red",
                      fontsize=8)
    right.set_xlabel("E2E latency p50 (ms)")
    right.set_ylabel("output tokens/s")
    right.set_title("throughput vs latency")
    right.legend(fontsize=7)
    fig.suptitle(f"deployctl bench {document['mode']}: {document['model']} at {document['target']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _telemetry_axes(axis, runs: list[dict], key: str) -> None:
    """Beside the latency curve: what the devices and the engines did at each load."""
    xs = [run[key] for run in runs]

    def series(name, scale=1.0):
        return [(run["telemetry"].get(name) * scale) if run["telemetry"].get(name) is not None else float("nan")
                for run in runs]

    axis.plot(xs, series("device_util_mean_pct"), "-o", label="NPU/GPU utilisation mean (%)")
    axis.plot(xs, series("device_mem_max_pct"), "-s", label="device memory max (%)")
    axis.plot(xs, series("kv_cache_usage_max", 100.0), "-^", label="KV cache usage max (%)")
    axis.set_ylim(0, 105)
    axis.set_xlabel("concurrency" if key == "parallel_num" else "request rate (req/s)")
    axis.set_ylabel("%")
    counts = axis.twinx()
    counts.plot(xs, series("preemptions"), ":x", color="red", label="preemptions")
    counts.plot(xs, series("waiting_max"), ":+", color="purple", label="waiting max")
    counts.set_ylabel("requests")
    axis.set_title("telemetry during each run")
    lines = axis.get_legend_handles_labels()
    more = counts.get_legend_handles_labels()
    axis.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")


def format_ms(value) -> str:
    """Milliseconds to one decimal, "-" for no samples; a value that rounds to zero prints 0.0, never -0.0."""
    if value is None:
        return "-"
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


_TABLE_LATENCIES = (("ttft_ms", "p50"), ("ttft_ms", "p99"), ("tpot_ms", "p50"), ("tpot_ms", "p99"), ("itl_ms", "p50"),
                    ("e2el_ms", "p50"), ("e2el_ms", "p99"))


def table_rows(document: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the terminal table (pure)."""
    key = run_key(document["mode"])
    header = ["concurrency" if key == "parallel_num" else "rate", "in/out", "ok/fail", "req/s", "out tok/s",
              "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "E2E p50", "E2E p99"]
    slos = any("slo" in run for run in document["runs"])
    if slos:
        header += ["SLO", "goodput req/s", "good %"]
    rows = []
    runs = sorted(document["runs"], key=lambda r: r[key]) if "search" in document else document["runs"]
    for run in runs:  # a search's curve reads by load, not in the order it ran
        row = [f"{run[key]:g}", f"{run['prompt_tokens']}/{run['output_tokens']}",
               f"{run['succeeded']}/{run['failed']}", f"{run['request_throughput']:.2f}",
               f"{run['output_token_throughput']:.1f}",
               *(format_ms(run[metric][pct]) for metric, pct in _TABLE_LATENCIES)]
        if slos:
            slo = run.get("slo")
            row += ([slo_verdict(slo), f"{slo['goodput_request_throughput']:.2f}", f"{100 * slo['goodput_share']:.1f}"]
                    if slo else ["-", "-", "-"])
        rows.append(row)
    return header, rows


def slo_verdict(slo: dict) -> str:
    """`met`, or the statistics that missed their limits: `missed ttft_p99`."""
    if slo["met"]:
        return "met"
    return "missed " + ", ".join(v["slo"] for v in slo["violations"])
