"""Doctor's compatibility row for a vllm-ascend host (pure): the server profile the spec runs with and the stack
it needs (CANN, torch_npu in the image; the NPU driver on the host), read from deployctl/data/server_profiles.json,
the vllm-ascend counterpart of compat.json's AscendCloud rows. The driver is the host's part: each row names the
oldest Ascend HDK its image's CANN runs on (CANN's release notes, cited in the row), and a host below it FAILs
(a guessed profile, version unknown, only WARNs)."""

from __future__ import annotations

from typing import Optional

from deployctl.facts.model import HostFacts
from deployctl.facts.versions import version_at_least
from deployctl.plan.findings import FAIL, PASS, WARN, Finding
from deployctl.spec.profiles import SOURCE_DEFAULT, ProfileChoice


def check_server_profile(choice: ProfileChoice, facts: HostFacts) -> Finding:
    """`server_profile`: which profile applies and why, what its image carries, and the host driver against it."""
    profile, needs = choice.profile, choice.profile.requires
    stack = ", ".join(f"{name} {needs[name]}" for name in ("cann", "torch_npu") if needs.get(name))
    wanted = needs.get("driver")
    expected = f"{profile.describe()}: {stack} in the image" + (f"; NPU driver >= {wanted}" if wanted else "")
    driver = _loaded_driver(facts)
    observed = f"{choice.describe()}" + (f"; driver {driver}" if driver else "")
    if wanted and driver and not version_at_least(driver, wanted):
        status = WARN if choice.source == SOURCE_DEFAULT else FAIL
        why = profile.sources.get("driver", f"vllm-ascend {profile.line}'s CANN {needs.get('cann')}")
        return Finding("server_profile", status, observed, expected,
                       f"install Ascend HDK {wanted} or later ({why}), or pin an older image / server_version")
    if choice.warning:
        return Finding("server_profile", WARN, observed, expected, "write server_version: or use an image tagged "
                                                                   "with its version")
    return Finding("server_profile", PASS, observed, expected, None)


def _loaded_driver(facts: HostFacts) -> Optional[str]:
    if facts.npu and facts.npu.ok and facts.npu.driver_version:
        return facts.npu.driver_version
    return facts.driver_files.version if facts.driver_files else None
