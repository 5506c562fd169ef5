"""Doctor's `server_profile` row on a vllm-ascend host: the profile, why it applies, the stack its image carries,
and the host's NPU driver against what the line recommends."""

from __future__ import annotations

from deployctl.doctor.report import host_reports
from deployctl.doctor.targets import plan_for_spec
from deployctl.facts.model import DriverVersionInfo, HostFacts
from deployctl.plan.checks_profile import check_server_profile
from deployctl.spec.load import load_spec_text
from deployctl.spec.profiles import select_profile
from tests.spec.test_upstream_build import QWEN3


def driver(version):
    return HostFacts(driver_files=DriverVersionInfo(version))


def test_the_row_names_the_profile_and_its_stack_and_passes_a_new_enough_driver():
    finding = check_server_profile(select_profile("0.13"), driver("25.5.0"))
    assert finding.status == "PASS" and finding.observed.endswith("from server_version 0.13; driver 25.5.0")
    assert finding.expected == ("vllm-ascend 0.13 (v0.12.0rc1 - v0.14.0rc1; vLLM 0.13.0): cann 8.5.0, torch_npu "
                                "2.8.0.post2 in the image; NPU driver >= 25.5")


def test_an_older_driver_or_a_guessed_profile_is_a_warning():
    old = check_server_profile(select_profile("0.13"), driver("24.1.0"))
    assert old.status == "WARN" and "install Ascend HDK 25.5 or later" in old.fix
    guessed = check_server_profile(select_profile(image="x/vllm-ascend:latest"), driver("25.5.0"))
    assert guessed.status == "WARN" and "by default" in guessed.observed
    no_driver = check_server_profile(select_profile("0.23"), HostFacts())
    assert no_driver.status == "PASS"  # the line names no driver: nothing to hold it to


def test_doctor_adds_the_row_for_vllm_ascend_specs_only():
    spec = load_spec_text(QWEN3 % "external")
    plan = plan_for_spec(spec)
    reports = host_reports(plan, {h.name: driver("25.5.0") for h in spec.hosts})
    assert all(r.finding("server_profile").status == "PASS" for r in reports)
    assert "from the image tag v0.23.0-a3" in reports[0].finding("server_profile").observed
