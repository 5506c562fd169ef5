"""The numeric bounds of every command-line option, in one table, as argparse `type=` callables.

A value outside its bound is refused by argparse itself (exit 2, `argument --flag: must be ... (got X)`), before
any host is asked or any file written. tests/test_cli_numbers.py fails when an option takes a number without an
entry here. Standard library only: cli.py imports this before it parses argv.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Optional, Union

Value = Union[int, float]

# Stated maxima (each far above any real use; they keep a typo from holding memory or a machine for days)
MAX_TOKENS = 1_048_576  # 2**20 tokens: above every model's max_model_len that deployctl knows
MAX_CONCURRENCY = 65_536  # requests in flight at once: one TCP port each on the client
MAX_RATE = 100_000.0  # req/s
MIN_RATE = 0.01  # req/s: one request per 100 s; bench/search.py stops coming down there too
MAX_REQUESTS = 1_000_000  # per run
MAX_WAVES = 10_000  # static epochs
DAY_S = 86_400.0
HOUR_S = 3_600.0
MAX_CARDS = 1024  # NPUs on one host: ranktable/rules.py's MAX_DEVICE_ID + 1
MAX_LINES = 1_000_000  # log lines per container
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Number:
    """One option's numbers: whole or not, the smallest and largest allowed (either may exclude itself);
    floats are always finite. Called by argparse with the option's text."""

    flag: str
    kind: type  # int or float
    minimum: Optional[Value] = None
    maximum: Optional[Value] = None
    above: bool = False  # the minimum itself is refused: `> minimum`
    below: bool = False  # the maximum itself is refused: `< maximum`

    def __call__(self, text: str) -> Value:
        value = self._parse(text)
        if self.minimum is not None and (value <= self.minimum if self.above else value < self.minimum):
            raise _refused(f"must be {'>' if self.above else '>='} {_show(self.minimum)}", text)
        if self.maximum is not None and (value >= self.maximum if self.below else value > self.maximum):
            raise _refused(f"must be {'<' if self.below else '<='} {_show(self.maximum)}", text)
        return value

    def _parse(self, text: str) -> Value:
        if self.kind is int:
            try:
                return int(text)
            except ValueError:
                raise _refused("must be a whole number", text) from None
        try:
            value = float(text)
        except ValueError:
            raise _refused("must be a number", text) from None
        if not math.isfinite(value):
            raise _refused("must be a finite number", text)
        return value


def _refused(why: str, text: str) -> argparse.ArgumentTypeError:
    """argparse prints `argument --flag: <why> (got <text>)` on one line: the text is quoted when it holds
    anything but plain characters, and cut when long."""
    shown = text.strip()
    shown = shown if shown.isprintable() and " " not in shown and shown else repr(text)
    return argparse.ArgumentTypeError(f"{why} (got {shown[:40] + '...' if len(shown) > 40 else shown})")


def _show(bound: Value) -> str:
    """86400, not 86400.0 or 8.64e+04; 0.01 as it is."""
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


_TABLE = (
    # the common flags
    Number("--connect-timeout", float, 0, HOUR_S, above=True),
    Number("--answer-tokens", int, 0, 4096),  # 0: the answer check is left out
    # up, status, logs, diagnose
    Number("--lock-wait", float, 0, DAY_S),  # 0: refuse at once
    Number("--health-timeout", float, 0, DAY_S, above=True),
    Number("--drain-timeout", float, 0, DAY_S),  # 0: take the server out and stop it at once
    Number("--shutdown-timeout", int, 0, HOUR_S),  # docker stop --time
    Number("--hang-timeout", float, 0, HOUR_S, above=True),
    Number("--interval", float, 0, DAY_S, above=True),  # watch: seconds between two probes
    Number("--tail", int, 0, MAX_LINES),  # 0: only what comes next (with -f)
    Number("--lines", int, 1, MAX_LINES),
    # ranktable gen / validate
    Number("--cards", int, 1, MAX_CARDS),
    # bench, every mode
    Number("--warmup", int, 0, MAX_REQUESTS),
    Number("--max-regression", float, 0, 1000),  # percent
    Number("--prompt-tokens", int, 1, MAX_TOKENS),
    Number("--output-tokens", int, 1, MAX_TOKENS),
    Number("--max-seconds", float, 0, 7 * DAY_S, above=True),
    Number("--prefix-share", float, 0, 1, below=True),
    Number("--prefix-groups", int, 1, MAX_REQUESTS),
    Number("--telemetry-interval", float, 0, HOUR_S),  # 0: off
    Number("--seed", int, 0, MAX_SEED),
    # bench static
    Number("--parallel-num", int, 1, MAX_CONCURRENCY),
    Number("--epochs", int, 1, MAX_WAVES),
    # bench dynamic
    Number("--request-rate", float, MIN_RATE, MAX_RATE),
    Number("--num-prompts", int, 1, MAX_REQUESTS),
    # bench search
    Number("--start", float, 0, MAX_RATE, above=True),  # a rate, or a concurrency (whole, checked by the command)
    Number("--max-runs", int, 1, 100),
    Number("--precision", float, 0, 1, above=True, below=True),
    Number("--run-seconds", float, 0, DAY_S, above=True),
)
BOUNDS = {number.flag: number for number in _TABLE}


def number(flag: str) -> Number:
    """The `type=` of option `flag` (a KeyError for a flag without bounds: add it to the table above)."""
    return BOUNDS[flag]
