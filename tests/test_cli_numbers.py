"""Every numeric option has its bounds in deployctl/cli_numbers.py, and a value outside them is refused by the
parser: exit 2, one line naming the flag and the bound, no traceback, nothing sent or written."""

from __future__ import annotations

import argparse
import math

import pytest

from deployctl import cli_numbers
from deployctl.cli import build_parser, main


def _every_option(parser: argparse.ArgumentParser, words=()):
    """(command words, action) for every option and positional of the whole tree."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _every_option(child, (*words, name))
        else:
            yield words, action


def test_every_option_that_takes_a_number_takes_its_bounds_from_cli_numbers():
    unbounded = []
    for words, action in _every_option(build_parser()):
        numeric_default = isinstance(action.default, (int, float)) and not isinstance(action.default, bool)
        listed_default = isinstance(action.default, list) and any(isinstance(v, (int, float)) for v in action.default)
        if action.type is None and not numeric_default and not listed_default:
            continue  # a string, a flag, a choice
        name = " ".join(words) + " " + "/".join(action.option_strings or [action.dest])
        if not isinstance(action.type, cli_numbers.Number):
            unbounded.append(f"{name}: type {action.type!r}")
        elif action.type.flag not in action.option_strings:  # the bounds of another option
            unbounded.append(f"{name}: bounds of {action.type.flag}")
    assert unbounded == [], "give these options a type from deployctl/cli_numbers.py"
    # and every bound in the table belongs to an option that exists
    flags = {flag for _, action in _every_option(build_parser()) for flag in action.option_strings}
    assert set(cli_numbers.BOUNDS) <= flags


def test_the_card_bound_is_the_ranktable_rules_own():
    from deployctl.ranktable.rules import MAX_DEVICE_ID

    assert cli_numbers.MAX_CARDS == MAX_DEVICE_ID + 1


def test_search_comes_down_no_lower_than_dynamic_accepts():
    from deployctl.bench.search import MIN_RATE

    assert cli_numbers.MIN_RATE == MIN_RATE


SPEC = "playbooks/demo-pd.yaml"
URL = "http://127.0.0.1:9"  # nothing listens: a case that got past the parser would fail differently (exit 1)
SEARCH = ["bench", "search", URL, "--slo", "ttft_p99=2000ms"]
DYNAMIC = ["bench", "dynamic", URL, "--prompt-tokens", "8", "--output-tokens", "2"]
STATIC = ["bench", "static", URL]

# (argv, the flag, what the error says about the bound)
CASES = [
    (["plan", SPEC, "--connect-timeout", "0"], "--connect-timeout", "must be > 0 (got 0)"),
    (["status", SPEC, "--connect-timeout", "-1"], "--connect-timeout", "must be > 0 (got -1)"),
    (["up", SPEC, "--connect-timeout", "nan"], "--connect-timeout", "must be a finite number (got nan)"),
    (["up", SPEC, "--connect-timeout", "1e9"], "--connect-timeout", "must be <= 3600 (got 1e9)"),
    ([*DYNAMIC, "--request-rate", "nan", "--num-prompts", "5"], "--request-rate", "must be a finite number (got nan)"),
    ([*DYNAMIC, "--request-rate", "inf", "--num-prompts", "5"], "--request-rate", "must be a finite number (got inf)"),
    ([*DYNAMIC, "--request-rate", "1e-9", "--num-prompts", "5"], "--request-rate", "must be >= 0.01 (got 1e-9)"),
    ([*DYNAMIC, "--request-rate", "1", "--num-prompts", "0"], "--num-prompts", "must be >= 1 (got 0)"),
    ([*DYNAMIC, "--request-rate", "1", "--num-prompts", "5", "--seed", "-1"], "--seed", "must be >= 0 (got -1)"),
    ([*SEARCH, "--max-seconds", "-1"], "--max-seconds", "must be > 0 (got -1)"),
    ([*SEARCH, "--start", "inf"], "--start", "must be a finite number (got inf)"),
    ([*SEARCH, "--start", "nan"], "--start", "must be a finite number (got nan)"),
    ([*SEARCH, "--start", "1e308"], "--start", "must be <= 100000 (got 1e308)"),
    ([*SEARCH, "--run-seconds", "inf"], "--run-seconds", "must be a finite number (got inf)"),
    ([*SEARCH, "--run-seconds", "nan"], "--run-seconds", "must be a finite number (got nan)"),
    ([*SEARCH, "--precision", "1"], "--precision", "must be < 1 (got 1)"),
    ([*SEARCH, "--max-runs", "0"], "--max-runs", "must be >= 1 (got 0)"),
    ([*SEARCH, "--epochs", "0"], "--epochs", "must be >= 1 (got 0)"),
    ([*SEARCH, "--prompt-tokens", "2000000000"], "--prompt-tokens", "must be <= 1048576 (got 2000000000)"),
    ([*STATIC, "--prompt-tokens", "8", "2000000000"], "--prompt-tokens", "must be <= 1048576 (got 2000000000)"),
    ([*STATIC, "--output-tokens", "0"], "--output-tokens", "must be >= 1 (got 0)"),
    ([*STATIC, "--parallel-num", "1", "0"], "--parallel-num", "must be >= 1 (got 0)"),
    ([*STATIC, "--epochs", "-2"], "--epochs", "must be >= 1 (got -2)"),
    ([*STATIC, "--warmup", "-1"], "--warmup", "must be >= 0 (got -1)"),
    ([*STATIC, "--prefix-share", "1.5"], "--prefix-share", "must be < 1 (got 1.5)"),
    ([*STATIC, "--prefix-groups", "0"], "--prefix-groups", "must be >= 1 (got 0)"),
    ([*STATIC, "--max-regression", "-5"], "--max-regression", "must be >= 0 (got -5)"),
    ([*STATIC, "--telemetry-interval", "inf"], "--telemetry-interval", "must be a finite number (got inf)"),
    (["ranktable", "validate", "x.json", "--cards", "0"], "--cards", "must be >= 1 (got 0)"),
    (["ranktable", "gen", "--prefill-server-list", "0", "--cards", "0"], "--cards", "must be >= 1 (got 0)"),
    (["ranktable", "gen", "--prefill-server-list", "0", "--cards", "2000"], "--cards", "must be <= 1024 (got 2000)"),
    (["logs", SPEC, "--tail", "-1"], "--tail", "must be >= 0 (got -1)"),
    (["up", SPEC, "--health-timeout", "-5"], "--health-timeout", "must be > 0 (got -5)"),
    (["up", SPEC, "--lock-wait", "-1"], "--lock-wait", "must be >= 0 (got -1)"),
    (["up", SPEC, "--answer-tokens", "-1"], "--answer-tokens", "must be >= 0 (got -1)"),
    (["plan", SPEC, "--answer-tokens", "x"], "--answer-tokens", "must be a whole number (got x)"),
    (["status", SPEC, "--hang-timeout", "0"], "--hang-timeout", "must be > 0 (got 0)"),
    (["diagnose", SPEC, "--lines", "0"], "--lines", "must be >= 1 (got 0)"),
    # the bounds of the flags added in round 38, stated here as well as in the table (issue 39)
    (["up", SPEC, "--shutdown-timeout=-1"], "--shutdown-timeout", "must be >= 0 (got -1)"),
    (["up", SPEC, "--shutdown-timeout", "3601"], "--shutdown-timeout", "must be <= 3600 (got 3601)"),
    (["up", SPEC, "--drain-timeout=-0.5"], "--drain-timeout", "must be >= 0 (got -0.5)"),
    (["plan", SPEC, "--drain-timeout", "86401"], "--drain-timeout", "must be <= 86400 (got 86401)"),
    (["watch", SPEC, "--interval", "0"], "--interval", "must be > 0 (got 0)"),
    (["watch", SPEC, "--interval", "86401"], "--interval", "must be <= 86400 (got 86401)"),
    (["diagnose", SPEC, "--lines", "1.5"], "--lines", "must be a whole number (got 1.5)"),
    (["diagnose", SPEC, "--lines", "1 2\n"], "--lines", "must be a whole number (got '1 2\\n')"),
]


@pytest.mark.parametrize("argv,flag,bound", CASES, ids=[" ".join(case[0][:2] + case[0][-2:]) for case in CASES])
def test_a_number_out_of_bounds_is_refused_naming_the_flag_and_the_bound(argv, flag, bound, capsys, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: the directory stays empty
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[-1].endswith(f": error: argument {flag}: {bound}"), err
    assert list(tmp_path.iterdir()) == []


# The words before the options of each command with a bounded option: a command without its entry here fails
# test_every_bound_has_its_cases below, so a new command or flag cannot land without the cases of its bounds.
COMMAND_ARGV = {
    **{(word,): [word, SPEC] for word in ("plan", "up", "down", "status", "watch", "monitor", "logs", "diagnose",
                                          "doctor")},
    ("image", "build"): ["image", "build", SPEC],
    ("weights", "sync"): ["weights", "sync", SPEC],
    ("ranktable", "gen"): ["ranktable", "gen", "--prefill-server-list", "0"],
    ("ranktable", "validate"): ["ranktable", "validate", "x.json"],
    ("bench", "static"): STATIC,
    ("bench", "dynamic"): [*DYNAMIC, "--request-rate", "1", "--num-prompts", "5"],
    ("bench", "search"): SEARCH,
    ("tune",): ["tune", SPEC, "--slo", "ttft_p99=1s"],
}


def _bounded_options():
    """(command words, flag) for every option of every command whose type is a bound of cli_numbers' table."""
    return [(words, flag) for words, action in _every_option(build_parser()) for flag in action.option_strings
            if flag in cli_numbers.BOUNDS]


def _just_beyond(value, kind: type, outward: float):
    """The next value past `value` towards `outward`: the next whole number, or the next float (nextafter)."""
    return value + (1 if outward > 0 else -1) if kind is int else math.nextafter(float(value), outward)


def _shown(value) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def _bound_text(bound) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


def _edges(number: cli_numbers.Number):
    """(which end, the value just outside it with the refusal it gets, the value just inside it) for each end it
    has (test_every_bound_has_its_cases refuses a number without both)."""
    if number.minimum is None or number.maximum is None:
        return []
    lower_out = number.minimum if number.above else _just_beyond(number.minimum, number.kind, -math.inf)
    lower_in = _just_beyond(number.minimum, number.kind, math.inf) if number.above else number.minimum
    upper_out = number.maximum if number.below else _just_beyond(number.maximum, number.kind, math.inf)
    upper_in = _just_beyond(number.maximum, number.kind, -math.inf) if number.below else number.maximum
    lower = f"must be {'>' if number.above else '>='} {_bound_text(number.minimum)}"
    upper = f"must be {'<' if number.below else '<='} {_bound_text(number.maximum)}"
    kind = number.kind
    return [("min", kind(lower_out), lower, kind(lower_in)), ("max", kind(upper_out), upper, kind(upper_in))]


EDGE_CASES = [(words, flag, end, outside, refusal, inside)
              for words, flag in _bounded_options() if words in COMMAND_ARGV
              for end, outside, refusal, inside in _edges(cli_numbers.BOUNDS[flag])]
EDGE_IDS = [f"{' '.join(case[0])} {case[1]} {case[2]}" for case in EDGE_CASES]


def test_every_bound_has_its_cases():
    """Every flag of the table has both a lower and an upper bound, and every command that takes one is covered."""
    assert [n.flag for n in cli_numbers.BOUNDS.values() if n.minimum is None or n.maximum is None] == []
    assert sorted({" ".join(words) for words, _ in _bounded_options() if words not in COMMAND_ARGV}) == []
    assert {flag for _, flag, *_ in EDGE_CASES} == set(cli_numbers.BOUNDS)


@pytest.mark.parametrize("words,flag,end,outside,refusal,inside", EDGE_CASES, ids=EDGE_IDS)
def test_each_end_of_each_bound_refuses_just_outside(words, flag, end, outside, refusal, inside, capsys, tmp_path,
                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: the directory stays empty
    with pytest.raises(SystemExit) as exit_info:
        main([*COMMAND_ARGV[words], f"{flag}={_shown(outside)}"])  # `=`: `-5e-324` is a value, not an option
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[-1].endswith(f": error: argument {flag}: {refusal} (got {_shown(outside)})"), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("words,flag,end,outside,refusal,inside", EDGE_CASES, ids=EDGE_IDS)
def test_each_end_of_each_bound_accepts_just_inside(words, flag, end, outside, refusal, inside):
    action = next(a for w, a in _every_option(build_parser()) if w == words and flag in a.option_strings)
    parsed = getattr(build_parser().parse_args([*COMMAND_ARGV[words], f"{flag}={_shown(inside)}"]), action.dest)
    assert (parsed[-1] if isinstance(parsed, list) else parsed) == inside
    assert type(parsed[-1] if isinstance(parsed, list) else parsed) is cli_numbers.BOUNDS[flag].kind


@pytest.mark.parametrize("text,value", [("0", 0.0), ("3600", 3600.0), ("2.5", 2.5)])
def test_bounds_keep_what_they_allow(text, value):
    assert cli_numbers.number("--lock-wait")(text) == value


def test_zero_connect_timeout_no_longer_means_the_default():
    from deployctl.transport.connect import ConnectOptions

    # the parser refuses 0; a caller that passes a timeout anyway gets that one, never a silent 10 s
    assert ConnectOptions.from_args(argparse.Namespace(connect_timeout=0.0)).timeout == 0.0
    assert ConnectOptions.from_args(argparse.Namespace()).timeout == 10.0


def test_a_concurrency_start_must_be_whole(capsys):
    assert main([*SEARCH, "--by", "concurrency", "--start", "2.5"]) == 2
    assert "--start 2.5: by concurrency, a whole number from 1 to 65536" in capsys.readouterr().err
