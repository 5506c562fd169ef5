"""`ranktable gen`'s server-list flags and its check of what it would write (pure)."""

from __future__ import annotations

import pytest

from deployctl.errors import RanktableError, UsageError
from deployctl.ranktable.gen_request import parse_server_list, refuse_invalid
from tests.ranktable.samples import text


def test_server_list_items_and_quoted_lists_are_instances():
    assert parse_server_list("--f", ["4,5", "6,7"]) == [(4, 5), (6, 7)]
    assert parse_server_list("--f", ["4,5 6,7"]) == [(4, 5), (6, 7)]
    assert parse_server_list("--f", []) == []


@pytest.mark.parametrize("word, message", [("4,x", "'4,x' is not a comma-separated list of device ids (e.g. 4,5)"),
                                           ("-1", "'-1': device ids are 0 or more")])
def test_bad_server_list_names_flag_and_word(word, message):
    with pytest.raises(UsageError) as caught:
        parse_server_list("--decode-server-list", [word])
    assert caught.value.message == f"--decode-server-list: {message}"


def test_refuse_invalid_passes_a_valid_file_and_names_the_bad_one():
    refuse_invalid({"good.json": text("pd-2host-node1-global")}, None)
    with pytest.raises(RanktableError) as caught:
        refuse_invalid({"bad.json": text("broken-duplicate-device-ip")}, None)
    assert "no file written" in caught.value.message
    assert caught.value.problems and all(p.file == "bad.json" for p in caught.value.problems)
