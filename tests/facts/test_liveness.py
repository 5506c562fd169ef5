"""The one-token generate per API server: `PORT HTTP_CODE BYTES` lines -> answers; an empty 200 is no answer."""

import pytest

from deployctl.errors import FactParseError
from deployctl.facts.liveness import Answer, parse_liveness


def test_answers_by_port_and_what_counts_as_generated():
    answers = parse_liveness("8080 200 312\n8081 000 0\n9000 200 0\n8082 503 41\n")
    assert answers == {8080: Answer(200, 312), 8081: Answer(0, 0), 9000: Answer(200, 0), 8082: Answer(503, 41)}
    assert [p for p, a in answers.items() if a.generated] == [8080]  # 000: timed out; 200 with no body: empty


def test_an_unreadable_line_is_a_parse_error():
    with pytest.raises(FactParseError):
        parse_liveness("8080 ok\n")
