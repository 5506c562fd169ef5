"""A `--baseline` document deployctl wrote may have been damaged since: each damage is refused (exit 2) naming the
file and what is wrong, before a request is sent and without a traceback (issue 39 item 6)."""

from __future__ import annotations

import json

import pytest

from deployctl.cli import main

SOUND = {"mode": "static", "runs": [{"parallel_num": 2, "prompt_tokens": 16, "output_tokens": 5,
                                     "output_token_throughput": 120.5, "ttft_ms": {"p50": 20.1, "p99": 25.0},
                                     "tpot_ms": {"p50": 2.0, "p99": 2.5}}]}
TEXT = json.dumps(SOUND)


def _with(change) -> str:
    doc = json.loads(TEXT)
    change(doc)
    return json.dumps(doc)


DAMAGE = {
    "not-json": ("mode: static", "not JSON"),
    "truncated": (TEXT[: len(TEXT) // 2], "not JSON"),
    "empty": ("", "not JSON"),
    "not-an-object": ("[1, 2]", "not a `deployctl bench` JSON document"),
    "unknown-mode": (_with(lambda d: d.update(mode=5)), "not a `deployctl bench` JSON document"),
    "runs-not-a-list": (_with(lambda d: d.update(runs={"a": 1})), "not a `deployctl bench` JSON document"),
    "run-not-an-object": (_with(lambda d: d["runs"].append("x")), "runs[1] is not an object"),
    "string-key": (_with(lambda d: d["runs"][0].update(parallel_num="two")), "runs[0].parallel_num: 'two'"),
    "nan": (TEXT.replace("25.0", "NaN"), "runs[0].ttft_ms.p99: nan is not a number"),
    "infinity": (TEXT.replace("120.5", "Infinity"), "runs[0].output_token_throughput: inf is not a number"),
    "huge": (TEXT.replace("2.5}", "1e300}"), "runs[0].tpot_ms.p99: 1e+300 is not a number"),
    "huge-int": (TEXT.replace("20.1", "9" * 40), "runs[0].ttft_ms.p50: 9999"),
    "negative": (TEXT.replace("2.0,", "-2.0,"), "runs[0].tpot_ms.p50: -2.0 is not a number"),
    "statistics-not-an-object": (_with(lambda d: d["runs"][0].update(ttft_ms=[20])),
                                 "runs[0].ttft_ms is not an object of statistics"),
    "boolean": (_with(lambda d: d["runs"][0].update(output_tokens=True)), "runs[0].output_tokens: True"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_baseline_is_refused_naming_the_file_and_the_damage(damage, capsys, tmp_path):
    text, said = DAMAGE[damage]
    path = tmp_path / "baseline.json"
    path.write_text(text)
    # port 9 on loopback: nothing may be sent before the baseline is judged
    code = main(["-o", "json", "bench", "static", "http://127.0.0.1:9", "--served-model-name", "m", "--parallel-num", "2",
                 "--prompt-tokens", "16", "--output-tokens", "5", "--baseline", str(path),
                 "--result-dir", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    message = json.loads(out)["error"]["message"]
    assert code == 2 and message.startswith(f"--baseline {path}: ") and said in message, (message, err)
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_a_sound_baseline_passes_the_check():
    from deployctl.bench.baseline import baseline_problem

    assert baseline_problem(SOUND) is None
