"""Hostile and odd ranktable files through `python -m deployctl ranktable validate|merge`: exit 2, the message,
no traceback, and no file written by a refused merge (issue 17 item 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE = Path(__file__).parent.parent / "fixtures" / "ranktable-hostile"
G1 = "server_group_list[1]"
D0 = f"{G1}.server_list[0].device[0]"

# file -> what validate says about it (the message, after `FILE: ` for unreadable files or `PATH: ` for rules)
CASES = {
    "not-json.json": "not JSON: Expecting value (line 1, column 1)",
    "empty.json": "not JSON: Expecting value (line 1, column 1)",
    "truncated.json": "not JSON: Expecting property name enclosed in double quotes (line 10, column 4)",
    "duplicate-key.json": 'not JSON: duplicate key "status" in one object',
    "nan.json": "not JSON: NaN is not a JSON number",
    "huge-integer.json": "not JSON: a number too long to convert",
    "invalid-utf8.json": "not JSON: invalid UTF-8 at byte 44",
    "nul-bytes.json": "not JSON: contains NUL bytes (a binary file?)",
    "top-level-array.json": "a JSON array, expected an object (a ranktable)",
    "top-level-string.json": "a JSON string, expected an object (a ranktable)",
    "deep-24.json": "JSON nested too deeply (more than 32 levels)",
    "groups-not-a-list.json": 'server_group_list: "0,1" is str, expected a list',
    "group-a-number.json": f"{G1}: 7 is an integer, expected an object",
    "group-id-a-number.json": f'{G1}.group_id: 1 is an integer, expected "1"',
    "server-list-an-object.json": f'{G1}.server_list: {{"a": 1}} is an object, expected a list',
    "server-count-a-number.json": f'{G1}.server_count: 1 is an integer, expected "1"',
    "server-count-negative.json": f'{G1}.server_count: "-1" is not a decimal number',
    "version-a-number.json": 'version: 1.0 is a number, expected "1.0"',
    "device-a-string.json": f'{G1}.server_list[0].device: "4,5" is str, expected a list',
    "device-id-a-number.json": f'{D0}.device_id: 4 is an integer, expected "4"',
    "device-id-float.json": f'{D0}.device_id: 4.5 is a number, expected "4.5"',
    "device-id-null.json": f"{D0}.device_id: null, expected a string",
    "device-id-a-list.json": f'{D0}.device_id: ["4"] is a list, expected a string',
    "device-id-negative.json": f'{D0}.device_id: "-1" is not a decimal number',
    "device-id-huge.json": f"{D0}.device_id: {'9' * 40} is not a device id (no host has more than 1024 NPUs)",
    "device-ip-not-an-ip.json": f'{D0}.device_ip: "npu4.example" is not an IPv4 address',
    "device-ip-out-of-range.json": f'{D0}.device_ip: "10.201.1.256" is not an IPv4 address',
    "device-ip-an-object.json": f'{D0}.device_ip: {{"ip": "10.201.1.14"}} is an object, expected a string',
    "server-ip-a-name.json": f'{G1}.server_list[0].server_ip: "local" is not an IPv4 address',
    "rank-id-a-word.json": f'{G1}.server_list[0].device[1].rank_id: "one" is not a decimal number',
    "rank-id-bool.json": f"{G1}.server_list[0].device[1].rank_id: true is a boolean, expected a string",
    "rank-id-duplicated.json": (f'{G1}.server_list[0].device[1].rank_id: rank_id "0" already used at '
                                f"{G1}.server_list[0].device[0].rank_id"),
}
UNREADABLE = {name for name, message in CASES.items() if not message.startswith(("server_group_list", "version"))}


def deployctl(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deployctl", *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def test_the_corpus_is_complete():
    assert sorted(CASES) == sorted(p.name for p in HOSTILE.glob("*.json"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_refuses_with_the_message(name):
    result = deployctl("ranktable", "validate", HOSTILE / name)
    assert result.returncode == 2, result.stdout + result.stderr
    assert CASES[name] in " ".join(result.stdout.split())
    assert f"INVALID {HOSTILE / name}" in result.stdout
    assert "Traceback" not in result.stderr and result.stderr == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_merge_refuses_with_the_message_and_writes_nothing(name, tmp_path):
    result = deployctl("ranktable", "merge", HOSTILE / name, "--save-dir", tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    err = " ".join(result.stderr.split())
    expected = f"error: {HOSTILE / name}: {CASES[name]}" if name in UNREADABLE else f"{HOSTILE / name}: {CASES[name]}"
    assert expected in err
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def _generated(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Files too big or too silly to keep in the repository, made here."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    deep_object = tmp_path / "deep-object.json"
    deep_object.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)  # sparse: 17 MiB of NULs, no disk used
    return {"deep": (deep, "JSON nested too deeply"), "deep-object": (deep_object, "JSON nested too deeply"),
            "huge": (huge, "too large: over 16 MiB (a ranktable is far smaller)"),
            "dev-zero": (Path("/dev/zero"), "too large: over 16 MiB (a ranktable is far smaller)"),
            "directory": (tmp_path, "cannot read: Is a directory")}


@pytest.mark.parametrize("case", ["deep", "deep-object", "huge", "dev-zero", "directory"])
def test_deep_huge_and_endless_inputs_are_clear_errors(case, tmp_path):
    path, message = _generated(tmp_path)[case]
    merged = deployctl("ranktable", "merge", path, "--save-dir", tmp_path / "out")
    assert merged.returncode == 2
    assert merged.stderr.startswith(f"error: {path}: {message}")
    assert not (tmp_path / "out").exists()
    validated = deployctl("ranktable", "validate", path, "-o", "json")
    assert validated.returncode == 2 and "Traceback" not in validated.stderr
    assert f'"message": "{message}' in validated.stdout


def test_one_hostile_file_does_not_hide_the_others(tmp_path):
    good = Path(__file__).parent.parent / "fixtures" / "formats" / "ranktable" / "pd-1host-global" / "stdout.txt"
    result = deployctl("ranktable", "validate", good, HOSTILE / "nul-bytes.json", HOSTILE / "rank-id-bool.json")
    assert result.returncode == 2
    assert result.stdout.splitlines()[-1] == "3 files: 1 valid, 2 invalid"
