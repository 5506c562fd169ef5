"""Host tuning checks with plain facts: 0/0/performance pass, anything else WARNs with the fix, absent SKIPs."""

from pathlib import Path

import pytest

from deployctl.errors import FactParseError
from deployctl.facts.host_tuning import HostTuning, parse_host_tuning
from deployctl.facts.model import HostFacts
from deployctl.doctor.checks_tuning import check_tuning, tuning_to_fix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "system"


def verdicts(tuning):
    return [(f.name, f.status, f.observed) for f in check_tuning(HostFacts(tuning=tuning))]


def test_a_fresh_server_warns_on_all_three_and_fix_takes_them():
    tuning = parse_host_tuning((FIXTURES / "host-tuning-fresh").read_text())
    assert tuning == HostTuning(60, 1, ("ondemand",) * 3 + ("performance",))
    findings = check_tuning(HostFacts(tuning=tuning))
    assert [(f.name, f.status, f.observed) for f in findings] == [
        ("swappiness", "WARN", "60"), ("numa_balancing", "WARN", "1"),
        ("cpu_governor", "WARN", "ondemand on 3 CPUs, performance on 1 CPU")]
    assert all("doctor --fix" in f.fix for f in findings)
    assert tuning_to_fix(findings) == ("swappiness", "numa_balancing", "cpu_governor")


def test_tuned_host_passes_and_missing_settings_skip():
    assert verdicts(HostTuning(0, 0, ("performance",) * 2)) == [
        ("swappiness", "PASS", "0"), ("numa_balancing", "PASS", "0"),
        ("cpu_governor", "PASS", "performance on 2 CPUs")]
    skipped = verdicts(parse_host_tuning((FIXTURES / "host-tuning-vm").read_text()))
    assert skipped == [("swappiness", "PASS", "0"), ("numa_balancing", "SKIP", "not in this kernel"),
                       ("cpu_governor", "SKIP", "no cpufreq on this host")]
    assert tuning_to_fix(check_tuning(HostFacts(tuning=HostTuning(0, None, ())))) == ()


def test_unreadable_answer_is_a_parse_error_and_no_answer_fails_as_unknown():
    with pytest.raises(FactParseError):
        parse_host_tuning("vm/swappiness sixty\nkernel/numa_balancing 1\n")
    with pytest.raises(FactParseError):
        parse_host_tuning("governor performance\n")
    assert {f.status for f in check_tuning(HostFacts())} == {"FAIL"}
