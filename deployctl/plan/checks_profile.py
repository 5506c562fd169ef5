"""Doctor's compatibility row for a vllm-ascend host (pure): the server profile the spec runs with and the stack
it needs (CANN, torch_npu in the image; the NPU driver on the host), read from deployctl/data/server_profiles.json,
the vllm-ascend counterpart of compat.json's AscendCloud rows. The driver is the host's part: older than the
profile names is a WARN (upstream recommends, it does not refuse)."""

from __future__ import annotations

from typing import Optional

from deployctl.facts.model import HostFacts
from deployctl.facts.versions import version_at_least
from deployctl.plan.findings import PASS, WARN, Finding
from deployctl.spec.profiles import ProfileChoice


def check_server_profile(choice: ProfileChoice, facts: HostFacts) -> Finding:
    """`server_profile`: which profile applies and why, what its image carries, and the host driver against it."""
    profile, needs = choice.profile, choice.profile.requires
    stack = ", ".join(f"{name} {needs[name]}" for name in ("cann", "torch_npu") if needs.get(name))
    wanted = needs.get("driver")
    expected = f"{profile.describe()}: {stack} in the image" + (f"; NPU driver >= {wanted}" if wanted else "")
    driver = _loaded_driver(facts)
    observed = f"{choice.describe()}" + (f"; driver {driver}" if driver else "")
    if wanted and driver and not version_at_least(driver, wanted):
        return Finding("server_profile", WARN, observed, expected,
                       f"install Ascend HDK {wanted} or later (vllm-ascend {profile.line} recommends it), or pin "
                       f"an older image / server_version")
    if choice.warning:
        return Finding("server_profile", WARN, observed, expected, "write server_version: or use an image tagged "
                                                                   "with its version")
    return Finding("server_profile", PASS, observed, expected, None)


def _loaded_driver(facts: HostFacts) -> Optional[str]:
    if facts.npu and facts.npu.ok and facts.npu.driver_version:
        return facts.npu.driver_version
    return facts.driver_files.version if facts.driver_files else None
