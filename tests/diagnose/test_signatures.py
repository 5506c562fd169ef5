"""The signature table is data; every signature has a real-looking line that it, and no earlier one, matches."""

import json
from pathlib import Path

import pytest

from deployctl.diagnose.signatures import Text, match, parse_signatures, signatures, top_hints

FIXTURES = Path(__file__).parents[1] / "fixtures"
LINES = json.loads((FIXTURES / "diagnose" / "signature-lines.json").read_text())["lines"]


def test_every_signature_has_a_known_line():
    assert {s.id for s in signatures()} == {row["id"] for row in LINES}


@pytest.mark.parametrize("row", LINES, ids=lambda r: f"{r['id']}-{r['kind']}")
def test_known_line_gives_its_hint(row):
    hints = match([Text("tb1", "containers/x/stdout.log", row["kind"], f"noise before\n{row['line']}\nnoise after\n")])
    assert [h.id for h in hints] == [row["id"]]
    hint = hints[0]
    assert hint.host == "tb1" and hint.source == "containers/x/stdout.log"
    assert hint.line == row["line"].strip()
    assert hint.hint == next(s.hint for s in signatures() if s.id == row["id"])


def test_hint_fields_are_the_json_document():
    hint = match([Text("tb2", "hccn/npu3-link.txt", "hccn-link", "link status: DOWN\n")])[0]
    assert hint.to_json() == {"id": "npu_link_down", "host": "tb2", "source": "hccn/npu3-link.txt",
                              "line": "link status: DOWN", "hint": hint.hint}


def test_healthy_outputs_give_no_hints():
    texts = [
        Text("tb1", "npu-smi-info.txt", "npu-smi",
             (FIXTURES / "formats/npu-smi/info-910b3-8x64g-healthy-23.0.6/stdout.txt").read_text()),
        Text("tb1", "hccn/npu0-link.txt", "hccn-link", "link status: UP\n"),
        Text("tb1", "hccn/npu0-net-health.txt", "hccn-health", "net health status: Success\n"),
        Text("tb1", "hccn/npu0-ip.txt", "hccn-ip", "ipaddr:10.201.1.10\nnetmask:255.255.255.0\n"),
        Text("tb1", "containers/p/stdout.log", "log",
             "INFO 06-01 10:00:00 [api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8088\n"
             "INFO 06-01 10:00:01 [worker_v1.py:181] Available KV cache memory: 41.22 GiB\n"
             "INFO 06-01 10:00:02 [externalinput.cc:372] HCCL_CONNECT_TIMEOUT set by default to [120]s\n"
             "2025-06-01T10:00:03Z standin: startup complete: serving on http://0.0.0.0:8088\n"),
        Text("tb1", "containers/p/inspect.json", "inspect", '[{"State": {"OOMKilled": false}}]\n'),
    ]
    assert match(texts) == []


def test_a_line_counts_for_the_first_signature_only_and_each_place_once():
    text = ("EI0002: The wait execution of the Notify register times out. HCCL timeout\n"
            "EI0002: again, later\n")
    hints = match([Text("tb1", "a.log", "log", text), Text("tb2", "a.log", "log", text)])
    assert [(h.id, h.host) for h in hints] == [("hccl_exec_timeout", "tb1"), ("hccl_exec_timeout", "tb2")]
    assert hints[0].line.startswith("EI0002: The wait")


def test_signatures_only_look_in_their_sources():
    # "link status: DOWN" in a container log is not a link fact; the hccn_tool answer is.
    assert match([Text("tb1", "x.log", "log", "link status: DOWN")]) == []


def test_hints_follow_the_table_order_and_top_hints_name_each_signature_once():
    texts = [Text("tb1", "x.log", "log", "[Errno 98] address already in use"),
             Text("tb2", "y.log", "log", "EI0006: Getting socket times out."),
             Text("tb1", "y.log", "log", "EI0006: Getting socket times out."),
             Text("tb1", "z.log", "log", "NPU out of memory. Tried to allocate 2.00 GiB")]
    hints = match(texts)
    assert [(h.id, h.host) for h in hints] == [("hccl_connect_timeout", "tb1"), ("hccl_connect_timeout", "tb2"),
                                              ("npu_oom", "tb1"), ("port_in_use", "tb1")]
    assert [h.id for h in top_hints(hints, 2)] == ["hccl_connect_timeout", "npu_oom"]


def test_a_long_line_is_cut():
    hint = match([Text("tb1", "x.log", "log", "EI0006 " + "x" * 2000)])[0]
    assert len(hint.line) <= 401 and hint.line.endswith("…")


def test_bad_table_is_refused():
    row = {"id": "a", "title": "t", "regex": "(", "sources": ["log"], "hint": "h"}
    with pytest.raises(ValueError, match="'a': bad regex"):
        parse_signatures(json.dumps({"signatures": [row]}))
    row["regex"] = "x"
    with pytest.raises(ValueError, match="listed twice"):
        parse_signatures(json.dumps({"signatures": [row, row]}))
