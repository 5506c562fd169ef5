"""`cat ip_local_port_range /proc/net/tcp /proc/net/tcp6` -> listening ports and the ephemeral range."""

from pathlib import Path

import pytest

from deployctl.errors import FactParseError
from deployctl.facts.listening import parse_listening

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "proc" / "listening-range-tcp-tcp6"


def test_listening_ports_of_both_tables_and_the_range():
    found = parse_listening(FIXTURE.read_text())
    # 54321 is an established connection (st 01), not a listener
    assert found.ports == {8000, 30000, 22, 12346}
    assert found.ephemeral == (32768, 60999)
    assert found.ephemeral_holds(32768) and not found.ephemeral_holds(30000)


@pytest.mark.parametrize("text", ["", "32768\n", "32768\t60999\n   0: nonsense 0A\n"])
def test_unreadable_answers_are_parse_errors(text):
    with pytest.raises(FactParseError):
        parse_listening(text)
