"""A re-run of `tune` with the same inputs (pure planning over the records on disk): measured candidates and ones
that failed to start are reused, the failed ones deployed again only with --retry-failed, and a candidate cut short
(no record, or a record file an interrupt left half written) is measured again."""

from __future__ import annotations

import json

from deployctl.commands.tune import _read, _write
from deployctl.tune.result import failed, measured, reusable
from deployctl.tune.step import Budget, next_step
from tests.tune.test_tune_core import bench, space

ERROR = "e2e-tune-mixed-0 exited while starting"


def test_reusable_keeps_measured_and_failed_records_and_retries_failed_ones_only_when_asked():
    done = measured({}, "a", 2, "r", bench(4, 5), 1.0)
    broken = failed({}, "b", 2, "r", ERROR, 3.0)
    assert reusable(done) is done and reusable(done, retry_failed=True) is done
    assert reusable(broken) is broken
    assert reusable(broken, retry_failed=True) is None
    # what no finished run writes: measured again
    for other in (None, [], "measured", {"status": "running", "label": "c"}, {"label": "d"}):
        assert reusable(other) is None and reusable(other, retry_failed=True) is None


def tune(found, disk: dict, retry_failed: bool, fails=(), cut=None):
    """One tune's loop as commands/tune.py runs it: the search's next step, then the record on disk when it stands
    for this run, else a deploy (named in `deployed`); `cut`: the candidate Ctrl-C stops mid-bench (no record)."""
    records, order, deployed = {}, [], []
    while True:
        step = next_step(found, records, order, Budget())
        if step.candidate is None:
            return records, order, deployed
        candidate = step.candidate
        order.append(candidate)
        known = reusable(disk.get(candidate), retry_failed)
        if known is not None:
            records[candidate] = {**known, "reused": True}
            continue
        deployed.append(candidate.label)
        if candidate.label == cut:
            return records, order[:-1], deployed
        cards = found.cards[candidate]
        record = (failed({}, candidate.label, cards, step.reason, ERROR) if candidate.label in fails else
                  measured({}, candidate.label, cards, step.reason, bench(4, 5, violations=("tpot_p99",)), 1.0))
        records[candidate] = disk[candidate] = record


def test_a_re_run_reuses_a_failed_start_and_deploys_it_again_only_with_retry_failed():
    found = space(["max_num_seqs=4,8,16", "max_num_batched_tokens=4096", "tp=2", "dp=1,2"])
    disk = {}
    first, order, deployed = tune(found, disk, retry_failed=False, fails={"tp2-dp2-seqs4-bt4096"})
    assert "tp2-dp2-seqs4-bt4096" in deployed and len(deployed) == len(order) > 2
    assert disk[next(c for c in order if c.label == "tp2-dp2-seqs4-bt4096")]["error"] == ERROR

    again, order_again, deployed_again = tune(found, disk, retry_failed=False)
    assert deployed_again == [] and order_again == order  # every record stands, the failure among them
    assert all(r["reused"] for r in again.values())
    assert {c.label: r["status"] for c, r in again.items()} == {c.label: r["status"] for c, r in first.items()}

    # --retry-failed: only the failed one is deployed again (it starts this time); the measured ones stand
    retried, _, deployed_retry = tune(found, disk, retry_failed=True)
    assert deployed_retry == ["tp2-dp2-seqs4-bt4096"]
    assert {c.label: r["status"] for c, r in retried.items()}["tp2-dp2-seqs4-bt4096"] == "measured"


def test_a_candidate_cut_mid_bench_is_measured_again_and_the_finished_ones_reused():
    found = space(["max_num_seqs=4,8,16", "max_num_batched_tokens=4096", "tp=2", "dp=1"])
    disk = {}
    _, finished, deployed = tune(found, disk, retry_failed=False, cut="tp2-dp1-seqs4-bt4096")
    assert deployed[-1] == "tp2-dp1-seqs4-bt4096" and len(finished) == len(deployed) - 1
    assert "tp2-dp1-seqs4-bt4096" not in {c.label for c in disk}
    records, _, resumed = tune(found, disk, retry_failed=False)
    assert resumed == ["tp2-dp1-seqs4-bt4096"]  # the cut one alone; the finished ones are reused
    assert sum(1 for r in records.values() if r.get("reused")) == len(finished)


def test_a_record_file_cut_short_reads_as_none_and_a_written_one_whole(tmp_path):
    # an interrupt during the write leaves the dot-file, never a half record under the record's name
    record = failed({"max_num_seqs": 8}, "x", 2, "r", ERROR)
    path = tmp_path / "x-abc.json"
    assert _read(path) is None
    (tmp_path / ".x-abc.json.tmp").write_text(json.dumps(record)[:20])
    assert _read(path) is None
    path.write_text(json.dumps(record)[:20])  # a file cut short all the same (written by another tool)
    assert reusable(_read(path)) is None
    _write(path, json.dumps(record))
    assert reusable(_read(path)) == record and reusable(_read(path), retry_failed=True) is None
