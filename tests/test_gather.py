"""run_probes' bound: the batch's own allowance plus what its probes' bounded reads may wait, so a host that answers
slowly within those bounds is not called unreachable (watch on a saturated host of several servers did)."""

from __future__ import annotations

import pytest

from deployctl.errors import HostError
from deployctl.facts.liveness import liveness_probe
from deployctl.facts.probe import Probe
from deployctl.facts.progress import progress_probe
from deployctl.gather import run_probes
from deployctl.transport.local import LocalTransport


def test_a_probe_that_waits_within_its_own_bound_is_answered_past_the_batch_allowance():
    slow = Probe(("sh", "-c", "sleep 1; echo answered"), lambda text: text.strip(), "slow", waits_s=60)
    ((probe, output),) = run_probes(LocalTransport("here"), [slow], timeout=0.2)
    assert (probe, output.exit_code, output.stdout.strip()) == (slow, 0, "answered")


def test_a_probe_without_a_bound_of_its_own_still_ends_at_the_batch_allowance():
    stuck = Probe(("sh", "-c", "sleep 30"), str, "stuck")
    with pytest.raises(HostError, match="timed out after 0.2 s"):
        run_probes(LocalTransport("here"), [stuck], timeout=0.2)


def test_the_progress_reads_run_one_after_another_and_the_generates_at_once():
    servers = tuple((8000 + n, "/health") for n in range(8))  # a host of 8 ranks (vllm-ascend, dp_launch external)
    assert progress_probe(servers, 10).waits_s == 160  # health, then /metrics, per server
    assert liveness_probe(servers, b"{}", 10).waits_s == 10
