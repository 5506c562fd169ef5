"""`ranktable gen` asks for devices of the host it runs on: ids 0..cards-1, and with the card count unknown (no
npu-smi, no --cards) no more than the most NPUs an Ascend host has; exit 2 naming the flag and the id, no file."""

from __future__ import annotations

import pytest

from deployctl.cli import main
from deployctl.ranktable.build import check_request
from deployctl.ranktable.rules import MAX_HOST_CARDS

HOST = "127.0.0.1"


@pytest.fixture
def unknown_cards(monkeypatch):
    """This host's count unknown, as where npu-smi is not installed, whatever this machine has."""
    monkeypatch.setattr("deployctl.commands.ranktable._card_count", lambda transport, requested: requested)


@pytest.mark.parametrize("flag,other", [("--prefill-server-list", "--decode-server-list"),
                                        ("--decode-server-list", "--prefill-server-list")])
@pytest.mark.parametrize("cards", [None, 8, 16])
def test_ids_beyond_the_host_are_refused_naming_the_flag(tmp_path, capsys, unknown_cards, flag, other, cards):
    out = tmp_path / "out"
    cards_flag = ["--cards", str(cards)] if cards else []
    assert main(["ranktable", "gen", flag, "98,99", other, "6,7", "--host-ip", HOST, "--save-dir", str(out),
                 *cards_flag]) == 2
    err = capsys.readouterr().err
    refused = [line.strip() for line in err.splitlines() if line.strip().startswith(flag + ":")]
    assert len(refused) == 2 and "98 is not a device id" in refused[0] and "99 is not a device id" in refused[1], err
    assert "Traceback" not in err and not out.exists()
    if cards is None:
        assert "hint: pass --cards N" in err and f"0-{MAX_HOST_CARDS - 1}" in err


def test_the_largest_host_ids_pass_the_check_with_the_count_unknown():
    check_request(HOST, [(0, 1)], [(14, 15)], None)  # no RanktableError: an A3 host has 0-15


def test_cards_given_beyond_the_known_maximum_allow_their_ids():
    check_request(HOST, [(16, 17)], [(30, 31)], 32)
