"""`ranktable gen` and `ranktable validate` judge by one set of rules (issue 17 item 11): what validate refuses in
a file, gen refuses in its server lists, with the same message, before gathering anything and writing no file."""

from __future__ import annotations

import json
import shutil

import pytest

from deployctl.cli import main

HOST = "127.0.0.1"  # bound on every machine: --host-ip passes, and gen refuses before any device IP is asked for


def per_host_global(prefill, decode) -> dict:
    """The file the vendor tool would write for these lists, built by hand (not by gen)."""
    def group(group_id, instances):
        servers = [{"server_id": HOST, "server_ip": HOST,
                    "device": [{"device_id": str(d), "device_ip": f"10.201.{n}.{rank + 10}", "rank_id": str(rank)}
                               for rank, d in enumerate(devices)]} for n, devices in enumerate(instances, 1 + 10 * int(group_id))]
        return {"group_id": group_id, "server_count": str(len(servers)), "server_list": servers}
    return {"version": "1.0", "status": "completed", "server_group_list": [group("1", prefill), group("2", decode)]}


CASES = {  # rule: (prefill, decode, cards, the message both print)
    "device id beyond the cards": ([(0, 9)], [(2, 3)], 8, "9 is not a device id (cards: 0-7)"),
    "device id 99 on 16 cards": ([(0, 99)], [(2, 3)], 16, "99 is not a device id (cards: 0-15)"),
    "device id beyond any host": ([(0, 2000)], [(2, 3)], None,
                                  "2000 is not a device id (no host has more than 1024 NPUs)"),
    "TP 3": ([(0, 1, 2)], [(3, 4, 5)], 8, "TP 3: an instance has 1, 2, 4, 8 or 16 devices (its TP size, a power of two)"),
    "TP 32": ([tuple(range(32))], [tuple(range(32, 64))], 64, "TP 32: an instance has 1, 2, 4, 8 or 16 devices"),
    "one NPU once": ([(0, 1)], [(1, 2)], 8, f"NPU 1 of {HOST} already used at"),
    "one TP size": ([(0,)], [(2, 3)], 8, "TP 2 differs from TP 1 of"),
}


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("rule", sorted(CASES))
def test_gen_and_validate_agree(rule, tmp_path, capsys):
    prefill, decode, cards, message = CASES[rule]
    if cards is None and shutil.which("npu-smi"):
        pytest.skip("npu-smi is installed: gen takes the card count from it")
    document = tmp_path / "global.json"
    document.write_text(json.dumps(per_host_global(prefill, decode), indent=4))
    cards_flag = ["--cards", str(cards)] if cards else []

    assert main(["ranktable", "validate", str(document), *cards_flag]) == 2
    refused = _words(capsys.readouterr().out)
    assert message in refused

    out = tmp_path / "out"
    lists = ["--prefill-server-list", *(",".join(map(str, i)) for i in prefill),
             "--decode-server-list", *(",".join(map(str, i)) for i in decode)]
    assert main(["ranktable", "gen", *lists, "--host-ip", HOST, "--save-dir", str(out), *cards_flag]) == 2
    err = _words(capsys.readouterr().err)
    assert err.startswith("error: refused: ") and "in the server lists; no file written" in err
    assert message in err
    assert not out.exists()


def test_gen_refuses_every_problem_at_once_naming_flag_and_instance(tmp_path, capsys):
    assert main(["ranktable", "gen", "--prefill-server-list", "0,1,2", "--decode-server-list", "3,99,5",
                 "--cards", "8", "--host-ip", HOST, "--save-dir", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.splitlines()[:4] == [
        "error: refused: 3 problems in the server lists; no file written",
        "  --prefill-server-list: prefill instance 1 (0,1,2): TP 3: an instance has 1, 2, 4, 8 or 16 devices "
        "(its TP size, a power of two)",
        "  --decode-server-list: decode instance 1 (3,99,5): 99 is not a device id (cards: 0-7)",
        "  --decode-server-list: decode instance 1 (3,99,5): TP 3: an instance has 1, 2, 4, 8 or 16 devices "
        "(its TP size, a power of two)",
    ]
    assert not (tmp_path / "o").exists()


def test_gen_cards_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ranktable", "gen", "--prefill-server-list", "0", "--cards", "0", "--host-ip", HOST])
    assert exit_info.value.code == 2
    assert "argument --cards: must be >= 1 (got 0)" in capsys.readouterr().err
