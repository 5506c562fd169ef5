"""The fake vendor tools render the real formats: byte for byte against the stored samples."""

from pathlib import Path

import pytest

from deployctl.facts.npu_smi import parse_npu_smi_info
from tests.testbed import fakes, prerender, profile

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
# The samples' facts as a profile: documentation addresses here are printed DATA, never contacted.
SAMPLE_HOST = {"device_ips": [f"198.51.100.{11 + n}" for n in range(8)]}

CASES = [
    ("npu-smi/info-910b3-8x64g-healthy-23.0.6", "npu-smi", SAMPLE_HOST),
    ("npu-smi/info-l-8cards", "npu-smi", SAMPLE_HOST),
    ("npu-smi/info-m-8cards-910b3", "npu-smi", SAMPLE_HOST),
    ("npu-smi/board-i1-23.0.6", "npu-smi", SAMPLE_HOST),
    ("npu-smi/board-invalid-card-id", "npu-smi", SAMPLE_HOST),
    ("npu-smi/health-i0-c0-ok", "npu-smi", SAMPLE_HOST),
    ("npu-smi/memory-i0-c0", "npu-smi", SAMPLE_HOST),
    ("npu-smi/info-dcmi-init-failed-8005", "npu-smi", {**SAMPLE_HOST, "npu_smi_fails": True}),
    ("npu-smi/info-910b3-procs-cards0-3", "npu-smi", {
        **SAMPLE_HOST,
        "processes": {
            "0": [{"pid": 214733, "name": "python3.9", "memory_mb": 52876},
                  {"pid": 214102, "name": "python3.9", "memory_mb": 112}],
            "1": [{"pid": 214736, "name": "python3.9", "memory_mb": 52876}],
            "2": [{"pid": 214739, "name": "python3.9", "memory_mb": 52876}],
            "3": [{"pid": 214742, "name": "python3.9", "memory_mb": 52876}],
        },
        "stats": {
            "0": {"power": 181.6, "temp": 53, "aicore": 14, "hbm_used": 56378},
            "1": {"power": 176.2, "temp": 55, "aicore": 12, "hbm_used": 56264},
            "2": {"power": 179.9, "temp": 52, "aicore": 13, "hbm_used": 56267},
            "3": {"power": 174.5, "temp": 56, "aicore": 12, "hbm_used": 56265},
            "4": {"power": 99.1}, "5": {"power": 95.7}, "6": {"power": 97.4, "temp": 43},
            "7": {"power": 100.8, "hbm_used": 3388},
        },
    }),
    ("hccn_tool/ip-g-dev0", "hccn_tool", SAMPLE_HOST),
    ("hccn_tool/ip-g-no-ip-configured", "hccn_tool", {**SAMPLE_HOST, "device_ips": [None] * 8}),
    ("hccn_tool/link-g-up", "hccn_tool", SAMPLE_HOST),
    ("hccn_tool/net-health-g-success", "hccn_tool", SAMPLE_HOST),
    ("hccn_tool/net-health-g-init", "hccn_tool", {**SAMPLE_HOST, "net_health": {"2": "Init"}}),
    ("hccn_tool/netdetect-g", "hccn_tool", SAMPLE_HOST),
    ("hccn_tool/tls-g-switch", "hccn_tool", SAMPLE_HOST),
    ("hccn_tool/ping-ok", "hccn_tool", {**SAMPLE_HOST, "reachable": ["198.51.100.31"]}),
    ("hccn_tool/ping-unreachable", "hccn_tool", {**SAMPLE_HOST, "reachable": ["198.51.100.32"]}),
]


def _expected(case: Path, name: str) -> str:
    path = case / name
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("case,tool,facts", CASES, ids=[c[0] for c in CASES])
def test_fake_renders_the_sample_byte_for_byte(case, tool, facts):
    sample = FORMATS / case
    argv = (sample / "cmd.txt").read_text().split()
    assert argv[0] == tool
    render = fakes.render_npu_smi if tool == "npu-smi" else fakes.render_hccn_tool
    stdout, stderr, code = render(argv[1:], facts)
    assert stdout == _expected(sample, "stdout.txt")
    assert stderr == _expected(sample, "stderr.txt")
    assert code == int((sample / "exit_code.txt").read_text())


def test_hccn_conf_matches_the_sample():
    assert fakes.render_hccn_conf(SAMPLE_HOST) == (FORMATS / "files/hccn-conf-8dev/stdout.txt").read_text()


def test_version_info_matches_the_sample():
    rendered = profile.VERSION_INFO.format(driver="23.0.6")
    assert rendered == (FORMATS / "files/driver-version-info-23.0.6/stdout.txt").read_text()


def test_ascend_install_info_matches_the_sample():
    rendered = profile.ASCEND_INSTALL_INFO.format(status="complete")
    assert rendered == (FORMATS / "files/ascend-install-info/stdout.txt").read_text()


def test_sixteen_card_profile_keeps_the_98_column_box():
    stdout, _, code = fakes.render_npu_smi(["info"], {"cards": 16})
    assert code == 0
    assert {len(line) for line in stdout.splitlines()} == {98}
    assert "| 15    910B3" in stdout


def test_unknown_device_id_is_refused_on_stderr():
    assert fakes.render_hccn_tool(["-i", "8", "-ip", "-g"], {}) == ("", "Get invalid device id.\n", 1)


def test_tool_script_is_sh_with_standalone_python_fallback():
    script = profile.tool_script("npu-smi")
    assert script.startswith("#!/bin/sh\n")
    start = script.index(f"<<'{prerender.PY_END}'\n") + len(prerender.PY_END) + 4
    python = script[start:script.rindex(f"\n{prerender.PY_END}\n")]
    compile(python, "npu-smi", "exec")
    assert python.endswith("sys.exit(main('npu-smi', sys.argv[1:]))")


def test_utilisation_and_hbm_set_in_the_profile_are_what_deployctls_parser_reads():
    # what bench telemetry samples: `set_profile(host, stats={card: {"aicore": %, "hbm_used": MB}})`
    stats = {"0": {"aicore": 87, "hbm_used": 61234}, "3": {"aicore": 100, "temp": 71}, 5: {"aicore": 42.6}}
    stdout, _, code = fakes.render_npu_smi(["info"], {"stats": stats, "processes": {"1": [
        {"pid": 4242, "name": "python3", "memory_mb": 50000}]}})
    assert code == 0 and {len(line) for line in stdout.splitlines()} == {98}
    chips = {chip.npu_id: chip for chip in parse_npu_smi_info(stdout).chips}
    assert {n: chips[n].aicore_pct for n in chips} == {0: 87, 1: 0, 2: 0, 3: 100, 4: 0, 5: 43, 6: 0, 7: 0}
    assert (chips[0].hbm_used_mb, chips[0].hbm_total_mb) == (61234, 65536)
    assert chips[1].hbm_used_mb == fakes.IDLE_HBM_USED[1] + 50000  # a card's processes use its HBM
    assert chips[3].temp_c == 71 and chips[3].hbm_used_mb == fakes.IDLE_HBM_USED[3]
