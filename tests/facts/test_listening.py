"""`cat ip_local_port_range ip_local_reserved_ports /proc/net/tcp /proc/net/tcp6` -> listening ports, the
ephemeral range and the ports reserved from it."""

from pathlib import Path

import pytest

from deployctl.errors import FactParseError
from deployctl.facts.listening import parse_listening, parse_port_list, port_list

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "proc" / "listening-range-reserved-tcp-tcp6"


def test_listening_ports_of_both_tables_the_range_and_the_reserved_ports():
    found = parse_listening(FIXTURE.read_text())
    # 54321 is an established connection (st 01), not a listener
    assert found.ports == {8000, 30000, 22, 12346}
    assert found.ephemeral == (32768, 60999)
    assert found.ephemeral_holds(32768) and not found.ephemeral_holds(30000)
    assert found.reserved == {8080, *range(36100, 36132)}
    assert found.exposed(36132) and not found.exposed(36131) and not found.exposed(30000)


def test_no_reserved_ports_is_an_empty_line():
    lines = FIXTURE.read_text().splitlines()
    found = parse_listening("\n".join([lines[0], "", *lines[2:]]))
    assert found.reserved == frozenset() and found.exposed(36100)


def test_the_kernels_list_format_both_ways():
    assert parse_port_list("8080,36100-36103") == {8080, 36100, 36101, 36102, 36103}
    assert port_list([36103, 8080, 36101, 36100, 36102, 9000]) == "8080,9000,36100-36103"
    assert parse_port_list(port_list(range(36100, 36132))) == set(range(36100, 36132))


@pytest.mark.parametrize("text", ["", "32768\n", "32768\t60999\n", "32768\t60999\nx-1\n",
                                  "32768\t60999\n\n   0: nonsense 0A\n"])
def test_unreadable_answers_are_parse_errors(text):
    with pytest.raises(FactParseError):
        parse_listening(text)
