"""core.flag_value: the one reader of a flag's value in an argv (`--flag X` or `--flag=X`, the last one wins)."""

from deployctl.core import flag_value


def test_both_spellings_and_the_last_wins():
    words = ("--shutdown-timeout", "30", "--model", "m", "--shutdown-timeout=90")
    assert flag_value(words, ("--shutdown-timeout",)) == "90"
    assert flag_value(words[:2], ("--shutdown-timeout",)) == "30"


def test_any_of_the_spellings_counts_and_a_prefix_does_not():
    assert flag_value(["-dcp", "2"], ("--decode-context-parallel-size", "-dcp")) == "2"
    assert flag_value(["--shutdown-timeout-s", "5"], ("--shutdown-timeout",)) is None


def test_absent_or_without_a_value_is_none():
    assert flag_value(["--model", "m"], ("--shutdown-timeout",)) is None
    assert flag_value(["--shutdown-timeout"], ("--shutdown-timeout",)) is None
    assert flag_value(["--port", 8000], ("--port",)) == "8000"
