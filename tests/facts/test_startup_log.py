"""Start-up milestones from real servers' log lines (tests/fixtures/startup-log/, `docker logs --timestamps`)."""

from pathlib import Path

import pytest

from deployctl.facts.startup_log import parse_stamp, parse_startup_logs
from deployctl.spec.profiles import profiles, vllm_startup

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "startup-log"


def _stamp(text):
    return parse_stamp(text + " x")[0]


def test_cold_vllm_start_ends_each_phase_at_its_last_line():
    found = parse_startup_logs((FIXTURES / "vllm-0.33-cold.log").read_text(), vllm_startup().log)
    m = found["demo-mixed-0"]
    assert m.started == _stamp("2026-11-25T10:00:00.25Z")
    # "Model loading took" comes after "Loading weights took": the later line ends the phase
    assert m.ended["weights_loaded"] == _stamp("2026-11-25T10:00:09.8Z")
    # graph capture follows torch.compile: the phase ends with it
    assert m.ended["graph_compiled"] == _stamp("2026-11-25T10:00:40Z")
    assert m.ended["server_ready"] == _stamp("2026-11-25T10:00:42.1Z")


def test_warm_start_is_read_too_and_a_missing_container_has_no_phases():
    found = parse_startup_logs((FIXTURES / "vllm-0.33-warm.log").read_text(), vllm_startup().log)
    warm = found["demo-mixed-0"]
    assert warm.ended["graph_compiled"] - warm.ended["weights_loaded"] < 10.0
    gone = found["demo-mixed-1"]
    assert gone.started is None and gone.ended == {}


def test_vllm_ascend_0_11_lines_and_a_zone_offset():
    line = next(p for p in profiles() if p.line == "0.11")
    found = parse_startup_logs((FIXTURES / "vllm-ascend-0.11.log").read_text(), line.startup.log)
    m = found["pd-prefill0-node1"]
    assert m.started == _stamp("2026-11-25T04:00:00Z")  # +08:00 read as such
    assert m.ended["weights_loaded"] - m.started == pytest.approx(20.5)
    assert m.ended["graph_compiled"] - m.started == pytest.approx(90.0)
    assert m.ended["server_ready"] - m.started == pytest.approx(92.0)


def test_every_profile_row_names_each_phase_and_its_cache_env():
    for row in profiles():
        assert set(row.startup.log) == {"weights_loaded", "graph_compiled", "server_ready"}
        assert all(row.startup.log.values()), row.line
        assert row.startup.cache_env.get("VLLM_CACHE_ROOT") == "{dir}"
        assert "startup_log" in row.sources and "compile_cache" in row.sources
    assert next(p for p in profiles() if p.line == "0.11").startup.cache_env["TORCHAIR_CACHE_HOME"] == "{dir}"


def test_lines_without_a_stamp_are_skipped():
    assert parse_stamp("Loading weights took 1.0 seconds") is None
    assert parse_stamp("2026-11-25T10:00:00Z hello") == (_stamp("2026-11-25T10:00:00Z"), "hello")
