"""The fake nvidia-smi renders the vendor captures in tests/fixtures/formats/nvidia-smi/ byte for byte."""

import shlex
from pathlib import Path

import pytest

from tests.testbed.fake_nvidia_smi import render

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "nvidia-smi"
R580_UUID = ["GPU-5f0c2d4e-1a7b-4c3d-9e8f-0123456789ab"]
BUSY = {"1": [{"pid": 48213, "name": "/usr/bin/python3", "memory_mib": 72514}]}

CASES = {
    "query-gpu-csv": {"gpus": 4, "nvidia_driver": "550.90.07", "gpu_idle_used_mib": 1},
    "query-gpu-csv-r580": {"gpu_uuids": R580_UUID},
    "query-gpu-csv-noheader-nounits": {"gpus": 2, "gpu_name": "NVIDIA L40S", "gpu_memory_mib": 46068,
                                       "gpu_idle_used_mib": 1,
                                       "gpu_processes": {"1": [{"pid": 7, "name": "python3", "memory_mib": 20416}]}},
    "query-gpu-csv-noheader-nounits-r580": {},
    "query-compute-apps-none": {},
    "query-compute-apps-busy": {"gpus": 4, "gpu_processes": BUSY},
    "list-1gpu": {"gpu_uuids": R580_UUID},
    "id-not-found": {},
    "query-invalid-field": {},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_renders_the_capture(name):
    argv = shlex.split((FORMATS / name / "cmd.txt").read_text())[1:]
    assert render(argv, CASES[name]) == (
        (FORMATS / name / "stdout.txt").read_text(), int((FORMATS / name / "exit_code.txt").read_text()))


def test_process_memory_adds_to_memory_used_of_its_gpu_only():
    out, code = render(["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                       {"gpus": 2, "gpu_processes": {"0": [{"pid": 1, "name": "p", "memory_mib": 100}]}})
    assert (out, code) == ("0, 100\n1, 0\n", 0)
