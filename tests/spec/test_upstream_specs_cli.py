"""server vllm-ascend specs that break a rule: `up` itself exits 2 with the one located error, before any host."""

from __future__ import annotations

import pytest

from tests.spec.corpus import SPECS, expectations
from tests.spec.test_hostile_spec_cli import deployctl, expected_lines

UPSTREAM = sorted((SPECS / "invalid").glob("va-*.yaml"))


def test_at_least_fifteen_bad_upstream_specs():
    assert len(UPSTREAM) >= 15
    for spec in UPSTREAM:
        assert len([e for e in expectations(spec.read_text()) if e.severity == "expect"]) == 1, spec.name


@pytest.mark.parametrize("spec", UPSTREAM, ids=lambda p: p.stem)
def test_up_refuses_the_spec_before_touching_a_host(spec):
    result = deployctl("up", str(spec), "--yes")
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: invalid spec:")  # nothing after validation (facts, SSH) ran
    (line,) = expected_lines(spec)
    assert line in result.stderr.splitlines(), (line, result.stderr)
