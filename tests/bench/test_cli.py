"""`deployctl bench` end to end against a local stand-in: files, exit codes, failures, baseline gate."""

from __future__ import annotations

import csv
import json
import time

import pytest

from deployctl.cli import main


def bench(capsys, *argv):
    code = main(["--output", "json", "bench", *argv])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


def test_static_writes_json_csv_png_and_counts_every_request(standin, capsys, tmp_path):
    server = standin(ttft_ms=5, tpot_ms=1)
    result = tmp_path / "results"
    began = time.monotonic()
    code, doc, err = bench(capsys, "static", server.url, "--parallel-num", "1", "3", "--prompt-tokens", "20", "40",
                           "--output-tokens", "4", "6", "--epochs", "2", "--result-dir", str(result), "--warmup", "2")
    elapsed_ms = (time.monotonic() - began) * 1000
    assert code == 0, err
    assert (doc["target"], doc["model"], doc["mode"]) == (server.url, "m", "static")  # model from /v1/models
    assert [(r["parallel_num"], r["prompt_tokens"], r["output_tokens"], r["requests"], r["succeeded"], r["failed"])
            for r in doc["runs"]] == [(1, 20, 4, 2, 2, 0), (1, 40, 6, 2, 2, 0), (3, 20, 4, 6, 6, 0), (3, 40, 6, 6, 6, 0)]
    first = doc["runs"][0]
    assert first["total_input_tokens"] == 40 and first["total_output_tokens"] == 8  # usage: 20 words, 4 tokens
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert set(first[key]) == {"mean", "p50", "p90", "p95", "p99"}
    # the stand-in waits 5 ms before the first token; the first token comes before the last, and all of it within
    # the time the whole bench took (bounds that hold however busy the machine, and catch a unit slip)
    assert 5 <= first["ttft_ms"]["p50"] <= first["e2el_ms"]["p50"] < elapsed_ms
    assert first["output_token_throughput"] == first["total_output_tokens"] / first["duration_s"]
    assert json.loads((result / "bench_static.json").read_text()) == doc
    rows = list(csv.DictReader((result / "bench_static.csv").open()))
    assert [int(r["requests"]) for r in rows] == [2, 2, 6, 6]
    assert float(rows[0]["ttft_ms_p99"]) == first["ttft_ms"]["p99"]
    assert (result / "bench_static.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # warm-up requests are sent but not counted: 2 + 2 + 2 + 6 + 6 on the server
    assert len(server.trace()) == 18


def test_dynamic_custom_dataset_chat_with_tokenizer(standin, capsys, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = ["[UNK]", "one", "two", "three", "four", "five"]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    dataset = tmp_path / "custom.json"
    dataset.write_text(json.dumps([{"prompt": "one two three", "output_tokens": 3},
                                   {"prompt": "four, five", "output_tokens": 5}]))
    server = standin(name="tiny")
    code, doc, err = bench(capsys, "dynamic", server.url, "--request-rate", "200", "50", "--num-prompts", "6", "4",
                           "--dataset", str(dataset), "--dataset-type", "custom", "--endpoint", "chat",
                           "--tokenizer", str(tmp_path), "--served-model-name", "tiny")
    assert code == 0, err
    assert [(r["request_rate"], r["requests"], r["succeeded"]) for r in doc["runs"]] == [(200.0, 6, 6), (50.0, 4, 4)]
    trace = server.trace()
    assert {t["path"] for t in trace.values()} == {"/v1/chat/completions"}
    rows = [(t["prompt_tokens"], t["completion_tokens"]) for t in trace.values()]
    assert set(rows) == {(3, 3), (2, 5)}  # the server counts words: "four, five" is 2 words
    # prompts are counted with the tokenizer when given: "four, five" is 3 tokens there ("four" "," "five")
    assert sum(r["total_input_tokens"] for r in doc["runs"]) == 3 * len(rows)
    assert sum(r["total_output_tokens"] for r in doc["runs"]) == sum(o for _, o in rows)


def test_every_request_failing_is_exit_1_with_the_errors_counted(standin, capsys):
    server = standin()
    code, doc, err = bench(capsys, "static", server.url, "--served-model-name", "nope", "--parallel-num", "2",
                           "--prompt-tokens", "8", "--output-tokens", "2", "--epochs", "1")
    assert code == 1
    (run,) = doc["runs"]
    assert (run["requests"], run["succeeded"], run["failed"]) == (2, 0, 2)
    assert run["errors"] == {"HTTP 404: The model `nope` does not exist.": 2}
    assert run["ttft_ms"]["p50"] is None and "every request failed" in err


def test_unreachable_target_fails_each_request(capsys):
    from tests.ports import free_port

    port = free_port()  # nothing listens there (and no outgoing connection can hold it: below the ephemeral range)
    code, doc, _ = bench(capsys, "static", f"http://127.0.0.1:{port}", "--served-model-name", "m",
                         "--parallel-num", "1", "--prompt-tokens", "8", "--output-tokens", "2", "--epochs", "2")
    assert code == 1 and doc["runs"][0]["failed"] == 2
    assert list(doc["runs"][0]["errors"]) == ["cannot connect: Connection refused"]


def test_bad_usage_is_exit_2(capsys, tmp_path):
    assert bench(capsys, "static", "http://127.0.0.1:9", "--prompt-tokens", "1", "2", "--output-tokens", "3")[0] == 2
    assert bench(capsys, "dynamic", "http://127.0.0.1:9", "--request-rate", "1", "2", "--num-prompts", "5")[0] == 2
    assert bench(capsys, "dynamic", "http://127.0.0.1:9", "--request-rate", "1", "--num-prompts", "5")[0] == 2
    assert bench(capsys, "static", "http://127.0.0.1:9", "--baseline", str(tmp_path / "missing.json"))[0] == 2
    assert bench(capsys, "static", "ftp://x", "--served-model-name", "m")[0] == 2


@pytest.mark.parametrize("url,why", [
    ("http://127.0.0.1:8000/a b", "a base URL holds no spaces, control or non-ASCII characters (found ' '"),
    ("http://127.0.0.1:8000/a\nb", "(found '\\n'"),
    ("http://127.0.0.1:8000/v1?x=1", "a base URL has no ?query or #fragment"),
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://127.0.0.1:0", "port 0 is no port to connect to"),
    ("http://", "not an http(s) URL"),
])
@pytest.mark.parametrize("named", [False, True], ids=["model-asked", "model-named"])
def test_a_malformed_url_is_refused_before_any_request(capsys, tmp_path, url, why, named):
    model = ["--served-model-name", "m"] if named else []
    code, doc, err = bench(capsys, "static", url, *model, "--result-dir", str(tmp_path / "r"))
    assert code == 2 and doc["error"]["message"].startswith(("not an http(s) URL", repr(url), url)), err
    assert why in doc["error"]["message"] and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_baseline_gate_trips_and_names_the_regression(standin, capsys, tmp_path):
    server = standin(ttft_ms=20, tpot_ms=2)
    argv = ["static", server.url, "--parallel-num", "2", "--prompt-tokens", "16", "--output-tokens", "5",
            "--epochs", "2"]
    code, doc, _ = bench(capsys, *argv)
    assert code == 0
    # Two runs on a busy machine differ by more than any threshold, so the baselines are set where no run can
    # land: a TTFT of 1 us (the stand-in waits 20 ms: every run regressed), then every metric far worse than
    # any run (none regressed).
    fast = json.loads(json.dumps(doc))
    fast["runs"][0]["ttft_ms"]["p50"] = 0.001
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(fast))
    code, _, err = bench(capsys, *argv, "--baseline", str(baseline), "--max-regression", "10")
    assert code == 1
    assert "ttft_ms.p50" in err and "parallel_num=2 16/5" in err
    slow = json.loads(json.dumps(doc))
    slow["runs"][0]["output_token_throughput"] = 1e-9
    for metric in ("ttft_ms", "tpot_ms"):
        slow["runs"][0][metric].update(p50=1e9, p99=1e9)
    baseline.write_text(json.dumps(slow))
    code, _, err = bench(capsys, *argv, "--baseline", str(baseline), "--max-regression", "60")
    assert code == 0 and "baseline: 1 run(s) compared, none regressed by more than 60%" in err


def test_static_table_through_a_pipe_prints_every_value_in_full(standin, tmp_path):
    from deployctl.bench.report import table_rows
    from tests.test_ui import assert_in_full, piped

    server = standin(name="a-served-model-name-long-enough-for-the-title")
    done = piped("bench", "static", server.url, "--parallel-num", "1", "2", "--prompt-tokens", "20",
                 "--output-tokens", "4", "--epochs", "1", "--result-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "bench_static.json").read_text())
    header, rows = table_rows(document)
    assert len(rows) == 2
    assert_in_full(done.stdout, [*header, *(cell for row in rows for cell in row), server.url,
                                 "a-served-model-name-long-enough-for-the-title"])


def test_prefix_heavy_synthetic_load_runs_and_a_bad_share_is_exit_2(standin, capsys):
    server = standin()
    code, doc, err = bench(capsys, "static", server.url, "--parallel-num", "2", "--prompt-tokens", "20",
                           "--output-tokens", "2", "--epochs", "2", "--prefix-share", "0.5", "--prefix-groups", "2")
    assert code == 0 and doc["runs"][0]["succeeded"] == 4, err
    assert bench(capsys, "dynamic", server.url, "--request-rate", "1", "--num-prompts", "1", "--dataset", "x.json",
                 "--prefix-share", "0.5")[0] == 2
