"""The host layout probe: the /dev/davinciN a host has and whether /usr/local/dcmi exists, parsed; the script run
for real with sh on a fake /dev."""

from __future__ import annotations

import subprocess

import pytest

from deployctl.errors import FactParseError
from deployctl.facts.host_layout import LAYOUT_SCRIPT, HostLayout, layout_probe, parse_host_layout


def test_parse_reads_device_ids_in_order_and_dcmi():
    assert parse_host_layout("davinci10\ndavinci2\ndavinci0\ndcmi\n") == HostLayout((0, 2, 10), True)
    assert parse_host_layout("") == HostLayout((), False)
    with pytest.raises(FactParseError, match="'davinciN' or 'dcmi'"):
        parse_host_layout("davinci_manager\n")


def test_the_script_lists_numbered_devices_only_and_never_fails(tmp_path):
    script = LAYOUT_SCRIPT.replace("/dev/", f"{tmp_path}/").replace("/usr/local/dcmi", f"{tmp_path}/dcmi")
    for name in ("davinci0", "davinci1", "davinci_manager"):
        (tmp_path / name).write_text("")
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and parse_host_layout(done.stdout) == HostLayout((0, 1), False)
    (tmp_path / "dcmi").mkdir()
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert parse_host_layout(done.stdout) == HostLayout((0, 1), True)
    assert layout_probe().key == "layout" and layout_probe().argv[:2] == ("sh", "-c")
