"""Doctor's `server_profile` row on a vllm-ascend host: the profile, why it applies, the stack its image carries,
and the host's NPU driver against what the line recommends."""

from __future__ import annotations

import pytest

from deployctl.doctor.report import host_reports
from deployctl.doctor.targets import plan_for_spec
from deployctl.facts.model import DriverVersionInfo, HostFacts
from deployctl.doctor.checks_profile import check_server_profile
from deployctl.spec.load import load_spec_text
from deployctl.spec.profiles import select_profile
from tests.spec.test_upstream_build import QWEN3


def driver(version):
    return HostFacts(driver_files=DriverVersionInfo(version))


def test_the_row_names_the_profile_and_its_stack_and_passes_a_new_enough_driver():
    finding = check_server_profile(select_profile("0.13"), driver("25.5.0"))
    assert finding.status == "PASS" and finding.observed.endswith("from server_version 0.13; driver 25.5.0")
    assert finding.expected == ("vllm-ascend 0.13 (v0.12.0rc1 - v0.14.0rc1; vLLM 0.12.0 - 0.14.1): cann 8.5.0, torch_npu "
                                "2.8.0.post2 in the image; NPU driver >= 25.5")


def test_a_driver_older_than_the_lines_cann_runs_on_fails_and_a_guessed_profile_only_warns():
    old = check_server_profile(select_profile("0.13"), driver("24.1.0"))
    assert old.status == "FAIL" and "install Ascend HDK 25.5 or later" in old.fix
    guessed = check_server_profile(select_profile(image="x/vllm-ascend:latest"), driver("24.1.rc2"))
    assert guessed.status == "WARN" and "by default" in guessed.observed
    no_driver = check_server_profile(select_profile("0.23"), HostFacts())
    assert no_driver.status == "PASS"  # no driver read on the host: nothing to hold it to


@pytest.mark.parametrize("version, floor", [
    # each row's CANN against the oldest Ascend HDK CANN's release notes pair it with (hicann/release-management)
    ("0.18.0", "25.5"),  # CANN 8.5.1: the 8.5 series (8.5.0 -> HDK 25.5.0)
    ("0.23.0", "25.5.1"),  # CANN 9.0.x in v0.20.2rc1 - v0.23.0rc1 (9.0.0, 9.0.1 notes: 25.5.1 and later)
    ("0.25.1rc1", "25.5.1"),  # CANN 9.0.1
    ("0.26.0rc1", "25.5"),  # CANN 9.1.0: 25.5.X, 26.0.RC1/25.7.RC1, 26.1.0
])
def test_the_lines_that_need_cann_9_fail_below_their_driver_floor(version, floor):
    choice = select_profile(version)
    below = check_server_profile(choice, driver("23.0.6"))
    assert below.status == "FAIL" and below.expected.endswith(f"NPU driver >= {floor}")
    assert f"install Ascend HDK {floor} or later (" in below.fix and "release-notes.md" in below.fix
    assert check_server_profile(choice, driver(floor + ".0" if floor.count(".") == 1 else floor)).status == "PASS"
    assert check_server_profile(choice, driver("26.0.rc1")).status == "PASS"


def test_doctor_adds_the_row_for_vllm_ascend_specs_only():
    spec = load_spec_text(QWEN3 % "external")
    plan = plan_for_spec(spec)
    reports = host_reports(plan, {h.name: driver("25.5.1") for h in spec.hosts})
    assert all(r.finding("server_profile").status == "PASS" for r in reports)
    assert "from the image tag v0.23.0-a3" in reports[0].finding("server_profile").observed
