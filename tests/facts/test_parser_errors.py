"""Malformed output: every parser raises FactParseError naming the tool, the line and what it expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployctl.errors import FactParseError
from deployctl.facts import docker, files, hccn_tool, npu_smi, nvidia_smi, system

FORMATS = Path(__file__).parent.parent / "fixtures" / "formats"
HEALTHY = (FORMATS / "npu-smi/info-910b3-8x64g-healthy-23.0.6/stdout.txt").read_text()
PROCS = (FORMATS / "npu-smi/info-910b3-procs-cards0-3/stdout.txt").read_text()


def _raises(parse, text) -> FactParseError:
    with pytest.raises(FactParseError) as info:
        parse(text)
    return info.value


def test_npu_table_cut_inside_the_npu_rows_names_the_end():
    text = "\n".join(HEALTHY.splitlines()[:13]) + "\n"  # ends after NPU 2's first row
    error = _raises(npu_smi.parse_npu_smi_info, text)
    assert error.tool == "npu-smi info"
    assert error.line == "<end of output>"
    assert "second row" in error.expected


def test_npu_table_cut_inside_the_process_box_names_the_missing_npu():
    lines = PROCS.splitlines()
    text = "\n".join(lines[: lines.index(next(l for l in lines if "NPU 5" in l))]) + "\n"
    error = _raises(npu_smi.parse_npu_smi_info, text)
    assert (error.tool, error.line) == ("npu-smi info", "<end of output>")
    assert error.expected == "the process rows of NPU 5 (truncated output?)"


def test_npu_table_with_a_mangled_row_names_that_line():
    lines = HEALTHY.splitlines()
    lines[7] = "| 0                         | 0000:C1:00.0  | 0           garbage                            |"
    error = _raises(npu_smi.parse_npu_smi_info, "\n".join(lines) + "\n")
    assert (error.line_no, error.line) == (8, lines[7])
    assert error.expected.startswith("'| <chip> | <bus id> |")


def test_a3_layout_is_refused_as_unsupported():
    text = (
        "+------------------------------------------------------------------------------------------------+\n"
        "| npu-smi 24.1.rc3                 Version: 24.1.rc3                                             |\n"
        "+---------------------------+---------------+----------------------------------------------------+\n"
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
        "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n"
        "+===========================+===============+====================================================+\n"
    )
    error = _raises(npu_smi.parse_npu_smi_info, text)
    assert error.line_no == 5 and "Phy-ID" in error.line
    assert "910B single-die table" in error.expected


@pytest.mark.parametrize("text", ["", "\n\n", "Segmentation fault\n", "<html>502 Bad Gateway</html>\n"])
def test_npu_smi_info_garbage_or_empty(text):
    error = _raises(npu_smi.parse_npu_smi_info, text)
    assert error.tool == "npu-smi info"
    assert error.line == text.strip()


def test_dcmi_failure_without_the_log_line_is_still_recognised():
    info = npu_smi.parse_npu_smi_info("dcmi model initialized failed, because the device is used. ret is -8020\n")
    assert (info.ok, info.error, info.dcmi_ret, info.chips) == (
        False, "dcmi model initialized failed, because the device is used", -8020, ())


GARBAGE = "this is not what the tool prints\n"


@pytest.mark.parametrize(
    "parse, tool",
    [
        (npu_smi.parse_npu_smi_count, "npu-smi info -l"),
        (npu_smi.parse_npu_smi_board, "npu-smi info -t board"),
        (hccn_tool.parse_hccn_ip, "hccn_tool -ip -g"),
        (hccn_tool.parse_hccn_link, "hccn_tool -link -g"),
        (hccn_tool.parse_hccn_tls, "hccn_tool -tls -g"),
        (hccn_tool.parse_hccn_ping, "hccn_tool -ping -g"),
        (files.parse_version_info, files.VERSION_INFO),
        (files.parse_hccn_conf, files.HCCN_CONF),
        (system.parse_sysctl_value, "sysctl -n"),
        (system.parse_df, "df -Pk"),
        (docker.parse_docker_version, "docker version"),
        (docker.parse_docker_info, "docker info"),
        (docker.parse_docker_ps, "docker ps"),
        (docker.parse_docker_inspect, "docker inspect"),
        (nvidia_smi.parse_nvidia_smi_query_gpu, "nvidia-smi --query-gpu"),
    ],
)
def test_garbage_names_tool_and_line(parse, tool):
    error = _raises(parse, GARBAGE)
    assert (error.tool, error.line_no, error.line) == (tool, 1, GARBAGE.strip())
    assert error.expected and tool in str(error) and "line 1" in str(error)


@pytest.mark.parametrize(
    "parse",
    [npu_smi.parse_npu_smi_count, npu_smi.parse_npu_smi_board, hccn_tool.parse_hccn_ip, hccn_tool.parse_hccn_link,
     hccn_tool.parse_hccn_tls, files.parse_version_info, system.parse_sysctl_value, system.parse_df,
     system.parse_uname_machine, docker.parse_docker_version, docker.parse_docker_info,
     docker.parse_docker_inspect],
)
def test_empty_output_is_an_error_not_a_default(parse):
    error = _raises(parse, "")
    assert (error.line_no, error.line) == (1, "")


def test_empty_outputs_that_mean_none():
    # no running container and no GPU process print nothing (or a bare header): an empty answer, not an error
    assert docker.parse_docker_ps("") == ()
    assert nvidia_smi.parse_nvidia_smi_compute_apps("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n") == ()


def test_npu_count_truncated():
    text = "\tTotal Count                    : 8\n\n\tNPU ID                         : 0\n\tChip Count                     : 1\n"
    error = _raises(npu_smi.parse_npu_smi_count, text)
    assert error.line_no == 4 and "8 'NPU ID'" in error.expected


def test_csv_row_with_a_missing_column():
    text = "index, name, memory.total [MiB], memory.used [MiB]\n0, NVIDIA H100 80GB HBM3, 81559 MiB\n"
    error = _raises(nvidia_smi.parse_nvidia_smi_query_gpu, text)
    assert (error.line_no, error.expected) == (2, "4 values separated by ', '")


def test_csv_not_available_values_are_none():
    gpus = nvidia_smi.parse_nvidia_smi_query_gpu("0, [N/A]\n", ["index", "power.draw"])
    assert gpus[0].power_draw_w is None and gpus[0].index == 0


def test_sysctl_non_numeric_value():
    error = _raises(system.parse_sysctl_value, "yes\n")
    assert (error.tool, error.line, error.expected) == ("sysctl -n", "yes", "the value as an integer")


def test_hccn_conf_bad_integer_names_its_line():
    error = _raises(files.parse_hccn_conf, "address_0=198.51.100.11\ntls_enable_0=maybe\n")
    assert (error.line_no, error.line) == (2, "tls_enable_0=maybe")


def test_hccn_conf_device_without_address():
    conf = files.parse_hccn_conf("netmask_3=255.255.255.0\naddress_1=198.51.100.12\n# comment\n")
    assert conf.address(3) is None and conf.address(1) == "198.51.100.12" and conf.address(7) is None
    assert [d.device_id for d in conf.devices] == [1, 3]


def test_docker_inspect_ascend_visible_devices_ranges():
    text = '[{"Id": "a", "Name": "/x", "State": {"Running": true}, "Config": {"Env": ["ASCEND_VISIBLE_DEVICES=0-1,6"], "Labels": null}, "HostConfig": {"Devices": null, "DeviceRequests": [{"Count": -1, "Capabilities": [["gpu"]]}]}}]'
    (container,) = docker.parse_docker_inspect(text)
    assert (container.name, container.npu_ids, container.gpu_ids, container.labels) == ("x", (0, 1, 6), ("all",), ())


def test_df_filesystem_with_spaces_and_mount_with_spaces():
    text = "Filesystem 1024-blocks Used Available Capacity Mounted on\nmy fs 100 40 60 40% /mnt/my weights\n"
    disk = system.parse_df(text)
    assert (disk.filesystem, disk.available_bytes, disk.mounted_on) == ("my fs", 61440, "/mnt/my weights")


def _mangled(text: str, rng) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 6)):
        if not chars:
            break
        at = rng.randrange(len(chars))
        chars[at:at + 1] = rng.choice(["", "|", "/", ":", " ", "0", "\n", "[", "{", "-"])
    return "".join(chars)


def test_parsers_are_total_on_cut_and_mangled_samples():
    """Any input gives a result or a FactParseError: never IndexError, KeyError, ValueError..."""
    import random

    from tests.facts.test_parsers import PARSED, _parser_for

    rng = random.Random(5)
    for case in PARSED:
        parse, _ = _parser_for((case / "cmd.txt").read_text().strip())
        text = (case / "stdout.txt").read_text() if (case / "stdout.txt").exists() else ""
        lines = text.splitlines(True)
        inputs = ["".join(lines[:cut]) for cut in range(len(lines))] + [_mangled(text, rng) for _ in range(25)]
        for variant in inputs:
            try:
                parse(variant)
            except FactParseError:
                pass
