"""The time-to-serve ledger adds up to the wall time; the workers' span is split along the server's own log."""

import pytest

from deployctl.facts.startup_log import StartupMilestones
from deployctl.plan.ledger import StepSpan, build_ledger, server_split, sums_to_wall


def _spans():
    return [
        StepSpan("image", "tb1", 1.0, 3.0, builds=True),
        StepSpan("ship", "tb1", 3.1, 4.0),
        StepSpan("weights", "tb1", 4.0, 6.0),
        StepSpan("weights", "tb2", 4.0, 7.0),  # the slower host sets the stage's span
        StepSpan("cache", "tb2", 7.0, 7.5),
        StepSpan("workers", "tb1", 8.0, 14.0, "d-mixed-0"),
        StepSpan("workers", "tb2", 8.0, 18.0, "d-mixed-1"),
        StepSpan("verify", "tb1", 18.2, 18.5, "d-mixed-0"),
    ]


def _milestones():
    # tb2's server (host clock, another epoch altogether): started, 3 s of weights, 5 s of compile, 1 s to ready
    return {"d-mixed-1": StartupMilestones(1000.0, {"weights_loaded": 1003.0, "graph_compiled": 1008.0,
                                                    "server_ready": 1009.0})}


def test_phases_add_up_to_the_wall_time_with_other_for_the_gaps():
    ledger = build_ledger(0.0, 20.0, _spans(), _milestones(), {"d-mixed-0": "tb1", "d-mixed-1": "tb2"})
    assert sum(ledger.phases.values()) == pytest.approx(20.0)
    assert sums_to_wall(ledger)
    p = ledger.phases
    assert p["prepare"] == pytest.approx(1.0)
    assert p["image_build"] == pytest.approx(2.0)
    assert p["weights_sync"] == pytest.approx(3.0)
    assert p["compile_cache"] == pytest.approx(0.5)
    # the slowest server's 10 s: 3 weights, 5 compile, 1 ready, the remaining 1 s container start
    assert (p["weights_loaded"], p["graph_compiled"], p["server_ready"], p["container_start"]) == \
        pytest.approx((3.0, 5.0, 1.0, 1.0))
    assert p["first_token"] == pytest.approx(0.3)
    assert p["report"] == pytest.approx(1.5)
    assert p["other"] == pytest.approx(0.1 + 0.5 + 0.2)  # ship->weights 0, cache->workers 0.5, ...
    assert list(p)[0] == "prepare" and list(p)[-1] == "other"


def test_per_host_rows_and_instances():
    ledger = build_ledger(0.0, 20.0, _spans(), _milestones(), {"d-mixed-0": "tb1", "d-mixed-1": "tb2"}).to_json()
    tb2 = [(r["phase"], r["start_s"]) for r in ledger["hosts"]["tb2"]]
    assert tb2[:2] == [("weights_sync", 4.0), ("compile_cache", 7.0)]
    assert [r["phase"] for r in ledger["hosts"]["tb2"][2:]] == ["container_start", "weights_loaded",
                                                                  "graph_compiled", "server_ready"]
    assert ledger["instances"]["d-mixed-1"]["graph_compiled_s"] == 5.0
    assert ledger["instances"]["d-mixed-1"]["source"] == "server log"
    assert ledger["instances"]["d-mixed-0"] == {"host": "tb1", "container_start_s": 6.0, "source": "deployctl"}


def test_a_host_clock_ahead_is_scaled_to_the_measured_span():
    split = server_split(4.0, StartupMilestones(0.0, {"weights_loaded": 4.0, "graph_compiled": 8.0}))
    assert sum(split.values()) == pytest.approx(4.0)
    assert split["container_start"] == 0.0


def test_a_missing_phase_is_left_out_not_invented():
    split = server_split(5.0, StartupMilestones(0.0, {"weights_loaded": 2.0, "server_ready": 3.0}))
    assert "graph_compiled" not in split
    assert split == pytest.approx({"container_start": 2.0, "weights_loaded": 2.0, "server_ready": 1.0})


def test_a_no_op_up_is_prepare_and_report():
    ledger = build_ledger(0.0, 2.0, [], {}, {})
    assert ledger.phases == {"prepare": 2.0, "report": 0.0, "other": 0.0}


def test_the_doctors_checks_are_a_phase_of_their_own_and_no_host_row():
    spans = [StepSpan("checks", "", 1.0, 2.5), StepSpan("workers", "tb1", 3.0, 4.0, "d-mixed-0")]
    ledger = build_ledger(0.0, 5.0, spans, {}, {"d-mixed-0": "tb1"})
    assert ledger.phases["prepare"] == 1.0 and ledger.phases["checks"] == 1.5
    assert sum(ledger.phases.values()) == pytest.approx(5.0)
    assert list(ledger.hosts) == ["tb1"]


def test_a_host_that_got_its_compile_cache_from_another_has_its_row_too():
    spans = _spans() + [StepSpan("cache", "tb1", 7.0, 7.4)]
    copies = {"tb3": {"key": "k", "from": "tb1", "seconds": 0.3, "bytes": 10, "via": "peer"}}
    ledger = build_ledger(0.0, 20.0, spans, {}, {}, copies).to_json()
    assert ledger["hosts"]["tb3"] == [{"phase": "compile_cache", "start_s": 7.0, "seconds": 0.3, "from": "tb1"}]
    assert ledger["compile_cache"]["hosts"]["tb3"]["via"] == "peer"
    assert sums_to_wall(build_ledger(0.0, 20.0, spans, {}, {}, copies))  # the phases are the stages' spans still
