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
