"""Which vllm-ascend server profile a spec renders with, and why: server_version over the version probed in the
image over the image tag over the newest (with a warning); and the packaged table itself."""

from __future__ import annotations

import pytest

from deployctl.spec.profiles import (
    SOURCE_DEFAULT, SOURCE_OVERRIDE, SOURCE_PROBED, SOURCE_TAG, image_tag, parse_version, profiles, select_profile,
    version_from_image,
)


def test_versions_order_rc_before_the_release_before_post():
    assert parse_version("0.11.0rc1") < parse_version("0.11.0rc3") < parse_version("v0.11.0") < parse_version(
        "0.11.0.post1") < parse_version("0.12.0rc1")
    assert parse_version("0.13") == parse_version("0.13.0") and parse_version("0.13.x") is None
    assert parse_version("v0.13.0rc1-a3") is None and parse_version("v0.13.0rc1-a3", prefix=True).kind == 0


@pytest.mark.parametrize("image, tag, line", [
    ("quay.io/ascend/vllm-ascend:v0.13.0rc1-a3", "v0.13.0rc1-a3", "0.13"),
    ("quay.io/ascend/vllm-ascend:v0.11.0rc1", "v0.11.0rc1", "0.11"),
    ("m.daocloud.io/quay.io/ascend/vllm-ascend:v0.23.0-a3-openeuler", "v0.23.0-a3-openeuler", "0.23"),
    ("registry:5000/vllm-ascend:v0.18.0@sha256:" + "a" * 64, "v0.18.0", "0.18"),
    ("quay.io/ascend/vllm-ascend:v0.14.0rc1", "v0.14.0rc1", "0.13"),  # the 0.13 line runs to v0.14.0rc1
    ("quay.io/ascend/vllm-ascend:v0.20.2rc1", "v0.20.2rc1", "0.23"),
])
def test_the_image_tag_is_the_offline_hint(image, tag, line):
    assert image_tag(image) == tag
    choice = select_profile(image=image)
    assert (choice.source, choice.shown, choice.profile.line, choice.warning) == (SOURCE_TAG, tag, line, None)
    assert choice.describe().endswith(f"from the image tag {tag}")
    assert f"; vLLM {choice.profile.vllm_range}" in choice.describe()


@pytest.mark.parametrize("image", ["quay.io/ascend/vllm-ascend:latest", "quay.io/ascend/vllm-ascend:main-a3",
                                   "vllm-ascend", "localhost:5000/vllm-ascend", None])
def test_an_unknown_version_takes_the_newest_profile_and_says_so(image):
    assert version_from_image(image) is None
    choice = select_profile(image=image)
    assert choice.source == SOURCE_DEFAULT and choice.profile is profiles()[-1]
    assert choice.profile.line in choice.warning and "unknown" in choice.warning


def test_server_version_overrides_the_probed_version_which_overrides_the_tag():
    image = "quay.io/ascend/vllm-ascend:v0.11.0rc1-a3"
    assert select_profile("0.13", image, probed="0.18.0").source == SOURCE_OVERRIDE
    assert select_profile("v0.13.0rc1", image).profile.line == "0.13"
    probed = select_profile(None, image, probed="0.18.0")
    assert (probed.source, probed.profile.line) == (SOURCE_PROBED, "0.18")
    assert probed.describe().endswith("probed in the image: 0.18.0")
    assert select_profile(None, image, probed="").source == SOURCE_TAG  # a probe that found nothing


def test_versions_outside_the_table_take_the_nearest_line_with_a_warning():
    old = select_profile("0.9.1")
    assert old.profile is profiles()[0] and "older than every profile" in old.warning
    new = select_profile("0.99.0")
    assert new.profile is profiles()[-1] and "newer than every release the profiles name" in new.warning


@pytest.mark.parametrize("image, line, newest", [
    # newer than every release named: the newest row applies, and says it is unchecked (#14757: an unlisted
    # release is "not ready for production")
    ("quay.io/ascend/vllm-ascend:v0.26.0rc2", "0.26", "every release the profiles name (the newest is v0.26.0rc1)"),
    ("quay.io/ascend/vllm-ascend:v0.27.1rc1-a3", "0.26", "every release the profiles name"),
    # past the last release of an older line: that line's row, never silently
    ("quay.io/ascend/vllm-ascend:v0.25.2rc1", "0.25", "every release of the 0.25 line (the newest is v0.25.1rc1)"),
])
def test_a_version_past_every_release_named_is_never_taken_silently(image, line, newest):
    choice = select_profile(image=image)
    assert choice.profile.line == line and f"newer than {newest}" in choice.warning
    assert "applies unchecked" in choice.warning


def test_v0_26_0rc1_has_its_own_row_and_no_warning():
    choice = select_profile(image="quay.io/ascend/vllm-ascend:v0.26.0rc1-a3")
    assert (choice.profile.line, choice.vllm, choice.warning) == ("0.26", "0.26.0", None)
    needs = choice.profile.requires
    assert (needs["cann"], needs["torch_npu"], needs["driver"]) == ("9.1.0", "2.10.0.post4", "25.5")
    assert choice.has_mooncake and choice.has_shutdown_timeout and choice.has_proxy_instances_api


@pytest.mark.parametrize("version, vllm, module", [
    # v0.23.0:docs/source/community/versioning_policy.md: the 0.13 line's tags pair with vLLM 0.12.0 - 0.14.1
    ("0.12.0rc1", "0.12.0", "vllm_ascend.distributed.mooncake_connector"),
    ("0.13.0", "0.13.0", "vllm_ascend.distributed.mooncake_connector"),
    # vllm-ascend #5719 (first in v0.14.0rc1) moved the connector under kv_transfer/kv_p2p
    ("0.14.0rc1", "0.14.1", "vllm_ascend.distributed.kv_transfer.kv_p2p.mooncake_connector"),
    ("0.20.2rc1", "0.20.2", "vllm_ascend.distributed.kv_transfer.kv_p2p.mooncake_connector"),
])
def test_a_line_names_the_vllm_and_connector_module_of_each_release(version, vllm, module):
    choice = select_profile(version)
    assert choice.vllm == vllm and choice.profile.connector_module_for(choice.version) == module
    assert f"{vllm} here" in choice.describe() or choice.profile.vllm_range == vllm


def test_validate_prints_the_vllm_under_the_version_it_read():
    from deployctl.commands.validate import profile_document

    doc = profile_document(select_profile(image="quay.io/ascend/vllm-ascend:v0.14.0rc1"))
    assert (doc["line"], doc["vllm"], doc["vllm_range"]) == ("0.13", "0.14.1", "0.12.0 - 0.14.1")
    assert profile_document(select_profile(image="x/vllm-ascend:v0.12.0rc1"))["vllm"] == "0.12.0"


@pytest.mark.parametrize("version, preload", [
    ("0.11.0", ()),  # v0.11.0:Dockerfile.a3 installs no jemalloc
    ("0.12.0rc1", ()),  # nor does v0.12.0rc1 (#5609); #5127 added it, first tagged v0.13.0rc1
    ("0.13.0rc1", ("/usr/lib/aarch64-linux-gnu/libjemalloc.so.2", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                   "/usr/lib64/libjemalloc.so.2")),
    ("0.26.0rc1", ("/usr/lib/aarch64-linux-gnu/libjemalloc.so.2", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                   "/usr/lib64/libjemalloc.so.2")),
])
def test_the_profile_says_which_library_the_image_preloads(version, preload):
    assert select_profile(version).preload == preload


def test_mooncake_is_in_the_image_from_v0_11_0rc3():
    assert not select_profile(image="x/vllm-ascend:v0.11.0rc2").has_mooncake
    assert select_profile(image="x/vllm-ascend:v0.11.0rc3").has_mooncake
    assert select_profile(image="x/vllm-ascend:latest").has_mooncake  # the newest line's images have it


def test_the_table_has_every_line_the_issue_names_and_the_newest_upstream_tag():
    lines = [p.line for p in profiles()]
    assert lines == ["0.11", "0.13", "0.18", "0.23", "0.25", "0.26"]  # v0.26.0rc1: releases/v0.26.0rc, 2026-08-22
    for profile in profiles():
        assert profile.kv_connector == "MooncakeConnectorV1" and profile.kv_connector_module_path is None
        assert "/usr/local/lib" in profile.library_path and profile.shm_size == "16g"
        assert set(profile.requires) >= {"cann", "torch", "torch_npu"} and profile.sources
        # every line from 0.13 names the oldest driver its CANN runs on, with its source (doctor FAILs below it)
        assert profile.line == "0.11" or (profile.requires["driver"] and "driver" in profile.sources)
        assert not profile.start_rank_on_head_is_hybrid_lb  # every line pairs with a vLLM before 0.28
    removed = {p.line: set(p.removed_additional_config) for p in profiles()}
    assert removed["0.11"] == set() and all(
        removed[line] == {"torchair_graph_config", "ascend_scheduler_config"} for line in ("0.13", "0.18", "0.23"))
    assert profiles()[0].env_for("decode") == {} and profiles()[1].env_for("decode")["HCCL_OP_EXPANSION_MODE"] == "AIV"


def test_the_table_is_read_once():
    assert profiles() is profiles()


@pytest.mark.parametrize("version, has_it", [
    ("0.11.0", False), ("0.11.0rc1", False),  # v0.11's proxy example has no /instances routes: 404
    ("0.12.0rc1", False),  # the 0.13 line starts before the API came (vllm-ascend #5063, first in v0.13.0rc1)
    ("0.13.0rc1", True), ("0.13.0", True), ("0.14.0rc1", True), ("0.18.0", True), ("0.23.0", True),
    ("0.25.1rc1", True),
])
def test_the_profile_says_whether_the_proxy_can_change_its_list(version, has_it):
    assert select_profile(version).has_proxy_instances_api is has_it


def test_an_unknown_version_of_a_line_is_taken_as_its_last_release_for_the_instances_api():
    rows = {row.line: row for row in profiles()}
    assert rows["0.13"].has_proxy_instances_api(None) and not rows["0.11"].has_proxy_instances_api(None)
    assert rows["0.13"].proxy_instances_api_from == "0.13.0rc1" and rows["0.11"].proxy_instances_api_from is None
