"""What diagnose asks each host is data: argv words, constant scripts with every value an argument. The scripts
themselves run here under sh against temporary directories and a fake docker."""

import os
import subprocess
import time

from deployctl.diagnose.plan import (
    CONTAINERS_SCRIPT, PLOG_SCRIPT, STATE_SCRIPT, collection_plan,
)
from deployctl.diagnose.bundle import split_framed
from deployctl.spec.load import check_spec_text

BASE = """version: 1
name: diag
hosts: {h1: {address: 192.0.2.11}, h2: {address: 192.0.2.12}}
requirements: {cards: 2}
image: {name: x:1}
weights: {dest: /srv/m}
model: {served_name: m}
topology:
  mode: mixed
  instances: [{host: h1, devices: [0], port: 8000}, {host: h2, devices: [0], port: 8000}]
"""


def load(extra=""):
    spec, errors, _ = check_spec_text(BASE + extra, "spec.yaml", None, {})
    assert not errors, errors
    return spec


def test_ascend_host_plan():
    items = collection_plan(load(), "h1", lines=50, marker="M1")
    names = [i.name for i in items]
    assert names == ["npu-smi info",
                     "hccn_tool -i 0 -link -g", "hccn_tool -i 0 -net_health -g", "hccn_tool -i 0 -ip -g",
                     "hccn_tool -i 1 -link -g", "hccn_tool -i 1 -net_health -g", "hccn_tool -i 1 -ip -g",
                     "/etc/hccn.conf", "dmesg", "df -h", "free -m", "docker info", "containers", "plog", "state"]
    by_name = {i.name: i for i in items}
    assert by_name["hccn_tool -i 1 -link -g"].command.argv == ("hccn_tool", "-i", "1", "-link", "-g")
    assert by_name["hccn_tool -i 1 -link -g"].path == "hccn/npu1-link.txt"
    assert by_name["containers"].command.argv == ("sh", "-c", CONTAINERS_SCRIPT, "sh",
                                                  "deployctl.deployment=diag", "50", "M1")
    assert by_name["plog"].command.argv[4:] == ("8", "50", "M1", "/root/ascend/log", "/var/log/npu")
    assert by_name["state"].command.argv[4:6] == ("/var/lib/deployctl/diag", "M1")
    assert by_name["state"].root == "/var/lib/deployctl/diag"
    assert by_name["dmesg"].command.argv[-1] == "50"


def test_gpu_host_plan_asks_nvidia_smi_and_no_npu_tools():
    spec = load().__class__(**{**load().__dict__, "platform": "gpu"})
    names = [i.name for i in collection_plan(spec, "h1", lines=10, marker="M")]
    assert names == ["nvidia-smi", "dmesg", "df -h", "free -m", "docker info", "containers", "state"]


def test_scripts_are_constants_every_value_an_argument():
    for item in collection_plan(load(), "h1", lines=77, marker="MARK"):
        argv = item.command.argv
        if argv[:2] == ("sh", "-c"):
            assert "MARK" not in argv[2] and "diag" not in argv[2] and "77" not in argv[2]
        assert all(isinstance(word, str) for word in argv)


def sh(script, *args, env=None):
    return subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, text=True, env=env, timeout=30)


def test_plog_script_tails_the_newest_files(tmp_path):
    a, b = tmp_path / "ascend", tmp_path / "npu"
    (a / "debug/plog").mkdir(parents=True)
    (b / "slog").mkdir(parents=True)
    old = a / "debug/plog/plog-1_old.log"
    old.write_text("old\n")
    os.utime(old, (time.time() - 3600,) * 2)
    (a / "debug/plog/plog-2_new.log").write_text("".join(f"line {n}\n" for n in range(10)))
    (b / "slog/device-0.log").write_text("EI0002: x\n")
    result = sh(PLOG_SCRIPT, "2", "3", "M", str(a), str(b), str(tmp_path / "missing"))
    assert result.returncode == 0, result.stderr
    sections = {name: body for what, name, body in split_framed(result.stdout, "M")}
    assert set(sections) == {str(a / "debug/plog/plog-2_new.log"), str(b / "slog/device-0.log")}
    assert sections[str(a / "debug/plog/plog-2_new.log")] == "line 7\nline 8\nline 9\n"


def test_plog_script_without_directories_says_nothing(tmp_path):
    result = sh(PLOG_SCRIPT, "8", "10", "M", str(tmp_path / "none"))
    assert result.returncode == 0 and result.stdout == ""


def test_state_script_sends_env_names_only(tmp_path):
    state = tmp_path / "state"
    (state / "ranktables").mkdir(parents=True)
    (state / "env").mkdir()
    (state / "lock").mkdir()
    (state / "ranktables/global_ranktable_merge.json").write_text('{"version": "1.0"}\n')
    (state / "env/diag-mixed-0.env").write_text("HF_TOKEN=hf_secret_value\nVLLM_API_KEY=abc=def\n")
    (state / "history.jsonl").write_text('{"action": "up"}\n')
    (state / "weights_fetch.py").write_text("print('program')\n")
    (state / ".lock-guard").write_text("")
    result = sh(STATE_SCRIPT, str(state), "M", "1048576")
    assert result.returncode == 0, result.stderr
    assert "hf_secret_value" not in result.stdout and "def" not in result.stdout
    sections = [(what, name.removeprefix(str(state)), body) for what, name, body in split_framed(result.stdout, "M")]
    assert sections == [("names", "/env/diag-mixed-0.env", "HF_TOKEN\nVLLM_API_KEY\n"),
                        ("file", "/history.jsonl", '{"action": "up"}\n'),
                        ("file", "/ranktables/global_ranktable_merge.json", '{"version": "1.0"}\n')]


def test_state_script_without_the_directory(tmp_path):
    result = sh(STATE_SCRIPT, str(tmp_path / "none"), "M", "10")
    assert result.returncode == 0 and result.stdout == ""


FAKE_DOCKER = """#!/bin/sh
case "$1" in
  ps) [ -n "$FAKE_DOWN" ] && { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
      echo "$*" > "$FAKE_LOG"; printf 'diag-mixed-0\\ndiag-mixed-0.previous\\n';;
  inspect) echo "[{\\"Name\\": \\"/$2\\"}]";;
  logs) echo "out of $5"; printf "err of %s" "$5" >&2;;
esac
"""


def test_containers_script_frames_inspect_stdout_and_stderr(tmp_path):
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "ps.log")}
    result = sh(CONTAINERS_SCRIPT, "deployctl.deployment=diag", "5", "M", env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ps.log").read_text().split() == [
        "ps", "--all", "--filter", "label=deployctl.deployment=diag", "--format", "{{.Names}}"]
    sections = split_framed(result.stdout, "M")
    assert sections[:3] == [("inspect", "diag-mixed-0", '[{"Name": "/diag-mixed-0"}]\n'),
                            ("stdout", "diag-mixed-0", "out of diag-mixed-0\n"),
                            ("stderr", "diag-mixed-0", "err of diag-mixed-0")]
    assert [s[:2] for s in sections[3:]] == [("inspect", "diag-mixed-0.previous"), ("stdout", "diag-mixed-0.previous"),
                                            ("stderr", "diag-mixed-0.previous")]
    down = sh(CONTAINERS_SCRIPT, "deployctl.deployment=diag", "5", "M", env={**env, "FAKE_DOWN": "1"})
    assert down.returncode == 97 and "Cannot connect" in down.stderr
