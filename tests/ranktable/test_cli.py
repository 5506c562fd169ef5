"""`deployctl ranktable merge|validate|gen` through deployctl.cli.main: files, output, exit codes."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path

import pytest

from deployctl.cli import main
from tests.ranktable.samples import MERGE_INPUTS, ROOT, text

FORMATS = ROOT.parent
NODE1 = str(MERGE_INPUTS / "global_ranktable_192.0.2.21.json")
NODE2 = str(MERGE_INPUTS / "global_ranktable_192.0.2.22.json")


def _sample(case: str) -> str:
    return str(ROOT / case / "stdout.txt")


# ---- merge ----------------------------------------------------------------------------------------

def test_merge_writes_the_vendor_file_byte_for_byte(tmp_path, capsys):
    assert main(["ranktable", "merge", NODE1, NODE2, "--save-dir", str(tmp_path)]) == 0
    written = tmp_path / "global_ranktable_merge.json"
    assert written.read_text(encoding="utf-8") == text("pd-2host-merged")
    assert str(written) in capsys.readouterr().out


def test_merge_takes_the_vendor_flag_too(tmp_path, capsys):
    assert main(["ranktable", "merge", "--global-ranktable-list", NODE1, NODE2, "--save-dir", str(tmp_path),
                 "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"written": [str(tmp_path / "global_ranktable_merge.json")]}
    assert (tmp_path / "global_ranktable_merge.json").read_text(encoding="utf-8") == text("pd-2host-merged")


def test_refused_merge_of_duplicate_device_ips_writes_no_file(tmp_path, capsys):
    bad = json.loads(Path(NODE2).read_text())
    bad["server_group_list"][0]["server_list"][0]["device"][0]["device_ip"] = "198.51.100.21"
    (tmp_path / "node2.json").write_text(json.dumps(bad, indent=4))
    out = tmp_path / "out"
    assert main(["ranktable", "merge", NODE1, str(tmp_path / "node2.json"), "--save-dir", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert "refused: 1 duplicate" in err and "198.51.100.21 already used at" in err


def test_refused_merge_of_two_schedulers_writes_no_file(tmp_path, capsys):
    other = {"version": "1.0", "status": "completed", "server_group_list": [
        {"group_id": "0", "server_count": "1", "server_list": [{"server_id": "192.0.2.23", "server_ip": "192.0.2.23"}]}]}
    (tmp_path / "other.json").write_text(json.dumps(other, indent=4))
    assert main(["ranktable", "merge", NODE1, NODE2, str(tmp_path / "other.json"), "--save-dir", str(tmp_path)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json"]
    assert "two schedulers" in capsys.readouterr().err


def test_merge_refuses_an_invalid_input_naming_file_and_path(tmp_path, capsys):
    assert main(["ranktable", "merge", NODE1, _sample("broken-non-string-values"), "--save-dir", str(tmp_path)]) == 2
    assert list(tmp_path.iterdir()) == []
    err = capsys.readouterr().err
    assert "broken-non-string-values/stdout.txt: server_group_list[0].server_count: 1 is an integer" in err


def test_merge_refuses_a_local_file(tmp_path, capsys):
    local = str(MERGE_INPUTS / "local_ranktable_192.0.2.21_host.json")
    assert main(["ranktable", "merge", NODE1, local, "--save-dir", str(tmp_path)]) == 2
    assert "a pd-local file, expected a per-host global ranktable" in capsys.readouterr().err


def test_merge_without_files_is_usage_error(capsys):
    assert main(["ranktable", "merge"]) == 2


# ---- validate -------------------------------------------------------------------------------------

def test_validate_json_document_and_exit_code(capsys):
    code = main(["ranktable", "validate", _sample("pd-2host-merged"), _sample("broken-duplicate-device-ip"),
                 "--output", "json"])
    assert code == 2
    assert json.loads(capsys.readouterr().out) == {
        "valid": False,
        "files": [
            {"file": _sample("pd-2host-merged"), "kind": "pd-global", "valid": True, "errors": []},
            {"file": _sample("broken-duplicate-device-ip"), "kind": "pd-global", "valid": False, "errors": [{
                "json_path": "server_group_list[2].server_list[0].device[0].device_ip",
                "message": "203.0.113.14 already used at server_group_list[1].server_list[0].device[0].device_ip",
                "rule": "device_ip unique",
            }]},
        ],
    }


def test_validate_all_valid_is_exit_0_with_a_table(capsys):
    assert main(["ranktable", "validate", _sample("pd-2host-node1-global"), _sample("mixed-1host-hccl-v1.0")]) == 0
    out = capsys.readouterr().out
    assert "pd-global-partial" in out and "hccl-v1.0" in out and "2 files: 2 valid, 0 invalid" in out


def test_validate_table_shows_each_error_with_its_path(capsys):
    assert main(["ranktable", "validate", _sample("broken-non-string-values")]) == 2
    out = capsys.readouterr().out
    assert "INVALID" in out and "6 errors" in out
    assert "server_group_list[1].server_list[0].device[1].rank_id: 1 is an integer" in out


def test_validate_complete_refuses_a_per_host_file(capsys):
    assert main(["ranktable", "validate", "--complete", NODE2, "-o", "json"]) == 2
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert (report["kind"], [e["json_path"] for e in report["errors"]]) == ("pd-global-partial", ["server_group_list"])


def test_validate_cards(capsys):
    assert main(["ranktable", "validate", "--cards", "4", NODE1, "-o", "json"]) == 2
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert [e["message"] for e in report["errors"]] == [f"{d} is not a device id (cards: 0-3)" for d in (4, 5, 6, 7)]


def test_validate_checks_locals_against_the_global(tmp_path, capsys):
    local = json.loads((MERGE_INPUTS / "local_ranktable_192.0.2.22_0123.json").read_text())
    local["server_list"][0]["device"][0]["device_ip"] = "198.51.100.99"
    (tmp_path / "local_ranktable_192.0.2.22_0123.json").write_text(json.dumps(local, indent=4))
    files = [_sample("pd-2host-merged"), str(MERGE_INPUTS / "local_ranktable_192.0.2.21_host.json"),
             str(tmp_path / "local_ranktable_192.0.2.22_0123.json"), _sample("pd-1host-local-45")]
    assert main(["ranktable", "validate", *files, "-o", "json"]) == 2
    reports = json.loads(capsys.readouterr().out)["files"]
    assert [r["valid"] for r in reports] == [True, True, False, False]
    assert [e["json_path"] for e in reports[2]["errors"]] == ["server_list[0].device[0].device_ip"]
    assert [(e["json_path"], e["message"]) for e in reports[3]["errors"]] == [(
        "server_list[0].server_ip", f"no global file given ({_sample('pd-2host-merged')}) has an entry on 192.0.2.18")]


def test_validate_a_save_dir_with_locals_of_several_hosts_and_deployments(capsys):
    examples = sorted(str(p) for p in (ROOT.parent.parent.parent.parent / "ranktables" / "examples").glob("*.json"))
    inputs = sorted(str(p) for p in MERGE_INPUTS.glob("*.json"))
    assert main(["ranktable", "validate", *examples, *inputs, "-o", "json"]) == 0


def test_validate_names_an_unreadable_or_non_json_file(tmp_path, capsys):
    (tmp_path / "broken.json").write_text("{not json")
    missing = str(tmp_path / "missing.json")
    assert main(["ranktable", "validate", str(tmp_path / "broken.json"), missing, "-o", "json"]) == 2
    reports = json.loads(capsys.readouterr().out)["files"]
    assert [(r["file"], r["kind"], r["errors"][0]["message"]) for r in reports] == [
        (str(tmp_path / "broken.json"), None, "not JSON: Expecting property name enclosed in double quotes "
                                              "(line 1, column 2)"),
        (missing, None, "cannot read: No such file or directory"),
    ]


# ---- gen (vendor mode, on this host) ---------------------------------------------------------------

DEVICE_IPS = {4: "203.0.113.14", 5: "203.0.113.15", 6: "203.0.113.16", 7: "203.0.113.17"}
# NPU 2: the tool says "no ip was preset". The hccn.conf fallback is read from /etc/hccn.conf only (no test knob):
# tests/e2e/test_ranktable.py proves it on a test bed host.
HCCN_CONF = Path("/etc/hccn.conf")


@pytest.fixture
def hccn(tmp_path, monkeypatch):
    """A fake hccn_tool first on PATH (vendor output format)."""
    bin_dir, answers = tmp_path / "bin", tmp_path / "answers"
    bin_dir.mkdir()
    answers.mkdir()
    good = (FORMATS / "hccn_tool" / "ip-g-dev0" / "stdout.txt").read_text()
    for device, ip in DEVICE_IPS.items():
        (answers / f"{device}.out").write_text(good.replace("198.51.100.11", ip))
    (answers / "fail.err").write_text((FORMATS / "hccn_tool" / "ip-g-no-ip-configured" / "stderr.txt").read_text())
    tool = bin_dir / "hccn_tool"
    tool.write_text(f'#!/bin/sh\n[ -f "{answers}/$2.out" ] && exec cat "{answers}/$2.out"\n'
                    f'cat "{answers}/fail.err" >&2\nexit 13\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


def test_gen_of_seed_001_writes_the_vendor_files(hccn, tmp_path, capsys):
    out = tmp_path / "save_dir"
    assert main(["ranktable", "gen", "--prefill-server-list", "4,5", "--decode-server-list", "6,7", "--api-server",
                 "--save-dir", str(out), "--host-ip", "127.0.0.1", "--cards", "8"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["global_ranktable_127.0.0.1.json", "local_ranktable_127.0.0.1_45.json",
                     "local_ranktable_127.0.0.1_67.json", "local_ranktable_127.0.0.1_host.json"]
    # the sample with this host's address: byte for byte
    assert (out / names[0]).read_text() == text("pd-1host-global").replace("192.0.2.18", "127.0.0.1")
    assert (out / names[1]).read_text() == text("pd-1host-local-45").replace("192.0.2.18", "127.0.0.1")
    assert str(out / names[0]) in capsys.readouterr().out


@pytest.mark.skipif(HCCN_CONF.exists(), reason="this machine has an /etc/hccn.conf")
def test_gen_names_the_npu_without_a_device_ip(hccn, tmp_path, capsys):
    out = tmp_path / "save_dir"
    assert main(["ranktable", "gen", "--prefill-server-list", "4,5", "--decode-server-list", "2,3",
                 "--save-dir", str(out), "--host-ip", "127.0.0.1", "--cards", "8"]) == 2
    assert not out.exists()
    err = " ".join(capsys.readouterr().err.split())
    assert ("error: NPU 2: no device IP: hccn_tool -i 2 -ip -g printed none (Get ipconf failed, because no ip was "
            "preset there!) and /etc/hccn.conf does not exist") in err


def test_gen_reads_no_hccn_conf_from_the_environment():
    # issue 19 item 3: a test-only knob in the product is gone
    source = (Path(__file__).parent.parent.parent / "deployctl" / "commands" / "ranktable.py").read_text()
    assert "environ" not in source and "DEPLOYCTL_HCCN_CONF" not in source


def test_gen_refuses_an_address_not_bound_here(hccn, tmp_path, capsys):
    assert main(["ranktable", "gen", "--prefill-server-list", "4,5", "--save-dir", str(tmp_path / "o"),
                 "--host-ip", "203.0.113.254"]) == 2
    assert "--host-ip 203.0.113.254: that address is not bound on this host" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_gen_detects_an_address_bound_here(bound_address, hccn, tmp_path):
    out = tmp_path / "o"
    assert main(["ranktable", "gen", "--prefill-server-list", "4,5", "--save-dir", str(out)]) == 0
    (global_file,) = out.glob("global_ranktable_*.json")
    server_ip = json.loads(global_file.read_text())["server_group_list"][0]["server_list"][0]["server_ip"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((server_ip, 0))  # raises unless the address is this host's
    assert not server_ip.startswith("127.") and server_ip == bound_address


def test_gen_bad_server_list_is_usage_error(capsys):
    assert main(["ranktable", "gen", "--prefill-server-list", "4,x", "--host-ip", "127.0.0.1"]) == 2
    assert "--prefill-server-list: '4,x' is not a comma-separated list of device ids" in capsys.readouterr().err
