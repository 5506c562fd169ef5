"""Every numeric option has its bounds in deployctl/cli_numbers.py, and a value outside them is refused by the
parser: exit 2, one line naming the flag and the bound, no traceback, nothing sent or written."""

from __future__ import annotations

import argparse

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
