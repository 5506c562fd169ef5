"""The image probe's answer: the image's ID, size and inputs label, the base image's ID, the NPU driver."""

import pytest

from deployctl.errors import FactParseError
from deployctl.facts.image_state import HostImage, image_probe, parse_image_state


def test_reads_image_size_label_base_and_driver_from_version_info():
    text = ('@@image\nsha256:abc 123456 {"deployctl.inputs":"sha256:in","x":"y"}\n@@base\nsha256:base\n'
            '@@board\n@@version\nVersion=23.0.6\npackage_version=23.0.6\n@@end\n')
    assert parse_image_state(text) == HostImage("sha256:abc", "sha256:in", "sha256:base", "23.0.6", 123456)
    assert parse_image_state("@@image\n@@base\n@@end\n") == HostImage()


def test_an_image_without_labels_has_no_inputs():
    assert parse_image_state("@@image\nsha256:abc 99 null\n@@base\n@@end\n") == HostImage("sha256:abc", size=99)


def test_a_cut_off_answer_is_a_parse_error():
    with pytest.raises(FactParseError):
        parse_image_state("@@image\nsha256:abc 1 {}\n@@base\n")


def test_the_probe_passes_values_as_arguments_never_in_the_script():
    probe = image_probe("img:1; rm -rf /", "base:2", "ascend")
    assert probe.argv[:2] == ("sh", "-c") and "rm -rf" not in probe.argv[2]
    assert probe.argv[4:] == ("img:1; rm -rf /", "base:2", "ascend")


@pytest.mark.parametrize("labels", ['["deployctl.inputs"]', '5', '"sha256:in"', '{"deployctl.inputs": 5}',
                                    '{"deployctl.inputs": ["sha256:in"]}', '{"deployctl.inputs": "sha2',
                                    "[" * 100000], ids=["list", "number", "string", "number-label", "list-label",
                                                        "cut", "nested"])
def test_damaged_labels_read_as_none_never_a_traceback(labels):
    """Labels read back from a host: cut, not an object, or an inputs label that is no string. The image counts as
    one deployctl did not build (image/plan.py rebuilds it), where `.get` of a list or `_short` of a number raised."""
    from deployctl.image.plan import plan_image_build

    state = parse_image_state(f"@@image\nsha256:abc 99 {labels}\n@@base\nsha256:base\n@@end\n")
    assert state == HostImage("sha256:abc", size=99, base_id="sha256:base")
    (action,) = plan_image_build(["h"], "each-host", {"h": state}, lambda base: "sha256:" + "1" * 64)
    assert (action.action, action.reason) == ("build", "image was not built by deployctl (no inputs label)")
