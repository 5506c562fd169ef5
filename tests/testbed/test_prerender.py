"""The sh fake tools answer exactly as the Python renderers do, from pre-rendered files or by falling back."""

import json
import os
import subprocess

import pytest

from tests.testbed import fake_nvidia_smi, fakes, prerender, profile

SAMPLE = {"device_ips": [f"10.201.9.{10 + n}" for n in range(7)] + [None], "health": {"3": "Alarm"},
          "net_health": {"2": "Init"}, "link": {"5": "DOWN"}, "tls": {"6": 1}}


@pytest.fixture
def host(tmp_path):
    """A fake dir with the profile and its pre-rendered answers, the three tools installed beside it."""
    fake_dir = tmp_path / "fake"
    log = tmp_path / "calls.log"

    def write(changes):
        full = fakes.with_defaults({**changes, "calls_log": str(log)})
        fake_dir.mkdir(exist_ok=True)
        (fake_dir / "profile.json").write_text(json.dumps(full))
        profile.write_outputs(fake_dir, full)
        return full

    for name, text in (("npu-smi", prerender.fakes_tool("npu-smi")), ("hccn_tool", prerender.fakes_tool("hccn_tool")),
                       ("nvidia-smi", prerender.nvidia_smi_tool())):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)

    def run(tool, *argv):
        result = subprocess.run([str(tmp_path / tool), *argv], capture_output=True, text=True,
                                env={**os.environ, "DEPLOYCTL_FAKE_DIR": str(fake_dir)})
        return result.stdout, result.stderr, result.returncode

    def calls():
        return [(c["tool"], c["argv"]) for c in map(json.loads, log.read_text().splitlines())]

    return write, run, calls


def test_every_prerendered_answer_equals_the_renderer_and_is_logged(host):
    write, run, calls = host
    full = write(SAMPLE)
    expected_calls = []
    for form in prerender.npu_smi_forms(full):
        assert run("npu-smi", *form) == fakes.render_npu_smi(form, full), form
        expected_calls.append(("npu-smi", form))
    for form in prerender.hccn_tool_forms(full):
        assert run("hccn_tool", *form) == fakes.render_hccn_tool(form, full), form
        expected_calls.append(("hccn_tool", form))
    assert calls() == expected_calls
    assert len(expected_calls) == 3 + 3 * 8 + 5 * 8


def test_fast_path_answers_from_files_and_writes_the_same_log_line(host, tmp_path):
    write, run, calls = host
    write({})
    out_dir = tmp_path / "fake" / "out" / "npu-smi"
    (out_dir / "info -l.out").write_text("from the file\n")  # proves the sh path, not Python, answered
    assert run("npu-smi", "info", "-l") == ("from the file\n", "", 0)
    line = json.loads((tmp_path / "calls.log").read_text())
    assert sorted(line) == ["argv", "pid", "time", "tool"]
    assert (line["tool"], line["argv"], type(line["time"]), type(line["pid"])) == ("npu-smi", ["info", "-l"], float, int)


def test_other_argv_falls_back_to_python(host):
    write, run, calls = host
    full = write(SAMPLE)
    ping = ["-i", "0", "-ping", "-g", "address", "10.201.8.10"]
    assert run("hccn_tool", *ping) == fakes.render_hccn_tool(ping, full)
    assert run("npu-smi", "info", "-t", "board", "-i", "9") == fakes.render_npu_smi(["info", "-t", "board", "-i", "9"],
                                                                                     full)
    assert run("npu-smi", "info -l") == fakes.render_npu_smi(["info -l"], full)  # one word with a space
    assert run("npu-smi") == fakes.render_npu_smi([], full)
    assert calls() == [("hccn_tool", ping), ("npu-smi", ["info", "-t", "board", "-i", "9"]),
                       ("npu-smi", ["info -l"]), ("npu-smi", [])]


def test_profile_change_replaces_the_answers(host, tmp_path):
    write, run, _ = host
    write({})
    failing = write({"npu_smi_fails": True, "cards": 2})
    assert run("npu-smi", "info") == (fakes.DCMI_FAILURE, "", 187) == fakes.render_npu_smi(["info"], failing)
    assert run("hccn_tool", "-i", "3", "-ip", "-g") == ("", "Get invalid device id.\n", 1)
    assert [p.name for p in (tmp_path / "fake").iterdir() if p.name.startswith("out-")] == [
        os.readlink(tmp_path / "fake" / "out")]


def test_without_prerendered_files_the_python_renderer_answers(tmp_path, monkeypatch):
    # Inside a container only /etc/hccn.conf and the tool are mounted: no profile, no out dir.
    monkeypatch.setenv("DEPLOYCTL_FAKE_DIR", str(tmp_path / "absent"))
    tool = tmp_path / "hccn_tool"
    tool.write_text(prerender.fakes_tool("hccn_tool"))
    tool.chmod(0o755)
    result = subprocess.run([str(tool), "-i", "0", "-ip", "-g"], capture_output=True, text=True)
    expected = fakes.render_hccn_tool(["-i", "0", "-ip", "-g"], fakes.load_profile("hccn_tool"))
    assert (result.stdout, result.stderr, result.returncode) == expected


def test_nvidia_smi_prerendered_on_gpu_profiles_only(host):
    write, run, calls = host
    assert "nvidia-smi" not in prerender.outputs(write({}))
    full = write({**fake_nvidia_smi.GPU_DEFAULTS, "cards": 0, "kind": "gpu", "gpus": 2,
                  "gpu_processes": {"1": [{"pid": 7, "name": "python3", "memory_mib": 20416}]}})
    for form in prerender.nvidia_smi_forms(full):
        stdout, code = fake_nvidia_smi.render(form, full)
        assert run("nvidia-smi", *form) == (stdout, "", code), form
    assert run("nvidia-smi", "-i", "5", "-L") == (fake_nvidia_smi.NO_DEVICES, "", 6)  # not pre-rendered: Python


def test_file_name_is_exact_or_none():
    assert prerender.file_name(["-i", "0", "-net_health", "-g"]) == "-i 0 -net_health -g"
    assert [prerender.file_name(a) for a in ([], ["info", ""], ["a b"], ["x/y"], ['"'])] == [None] * 5


def test_sh_tool_refuses_a_source_holding_the_end_marker():
    with pytest.raises(ValueError):
        prerender.sh_tool("npu-smi", f"x = 1\n{prerender.PY_END}\n", "")
