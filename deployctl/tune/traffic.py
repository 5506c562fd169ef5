"""`tune --traffic` (pure): the traffic every candidate is measured with — prompts from a dataset or synthetic
lengths, and the request rate it must serve within the SLOs — read from `KEY=VALUE` words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from deployctl.cli_numbers import MAX_RATE, MAX_TOKENS, MIN_RATE
from deployctl.errors import UsageError

DATASET_TYPES = ("sharegpt", "alpaca", "custom")  # as bench dynamic's --dataset-type
DEFAULT_LENGTHS = (1024, 128)  # bench search's synthetic prompt and output lengths


@dataclass(frozen=True)
class Traffic:
    prompt_tokens: Optional[int]  # None: the dataset's prompts
    output_tokens: Optional[int]  # None: the dataset's reference answers' lengths
    dataset: Optional[str] = None
    dataset_type: str = "sharegpt"
    rate: Optional[float] = None  # req/s each candidate must serve within the SLOs to meet them

    def settings(self, dataset_digest: Optional[str]) -> dict:
        """What of it makes a measurement reusable (beside the lengths, kept where they were): the dataset's
        content, not its path; nothing when --traffic is not given, so earlier records stay valid."""
        out = {}
        if self.dataset is not None:
            out.update(dataset_sha256=dataset_digest, dataset_type=self.dataset_type)
        if self.rate is not None:
            out["rate"] = self.rate
        return out


def parse_traffic(words: Sequence[str], prompt_tokens: Optional[int], output_tokens: Optional[int],
                  by: str) -> Traffic:
    """`--traffic dataset=FILE,dataset_type=alpaca --traffic lengths=1024/128 --traffic rate=4` (repeated or joined
    by commas) with --prompt-tokens/--output-tokens (None when not given) and --by -> Traffic."""
    given: dict[str, str] = {}
    for word in (w for text in words for w in text.split(",") if w.strip()):
        key, sep, value = word.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value or key not in ("dataset", "dataset_type", "lengths", "rate"):
            raise UsageError(f"--traffic {word!r}: expected dataset=FILE, dataset_type=sharegpt|alpaca|custom, "
                             "lengths=PROMPT/OUTPUT (tokens) or rate=REQ_PER_S")
        if key in given:
            raise UsageError(f"--traffic {key} given twice")
        given[key] = value
    if "dataset_type" in given and given["dataset_type"] not in DATASET_TYPES:
        raise UsageError(f"--traffic dataset_type={given['dataset_type']}: one of {', '.join(DATASET_TYPES)}")
    if "dataset_type" in given and "dataset" not in given:
        raise UsageError("--traffic dataset_type needs dataset=FILE")
    if "lengths" in given:
        if prompt_tokens is not None or output_tokens is not None:
            raise UsageError("--traffic lengths and --prompt-tokens/--output-tokens say the same: give one")
        prompt_tokens, output_tokens = _lengths(given["lengths"])
    rate = _rate(given["rate"]) if "rate" in given else None
    dataset = given.get("dataset")
    if (dataset is not None or rate is not None) and by != "rate":
        what = "dataset" if dataset is not None else "rate"
        # bench search's concurrency waves send synthetic prompts and set no rate (bench/runner.py SearchLoad)
        raise UsageError(f"--traffic {what} needs --by rate (concurrency waves send synthetic prompts, at no rate)")
    if dataset is not None:
        if prompt_tokens is not None:
            raise UsageError("--traffic dataset gives the prompts: it does not go with a prompt length")
        return Traffic(None, output_tokens, dataset, given.get("dataset_type", "sharegpt"), rate)
    return Traffic(prompt_tokens if prompt_tokens is not None else DEFAULT_LENGTHS[0],
                   output_tokens if output_tokens is not None else DEFAULT_LENGTHS[1], rate=rate)


def _lengths(text: str) -> tuple[int, int]:
    prompt, sep, output = text.partition("/")
    if not (sep and prompt.isdigit() and output.isdigit() and 1 <= int(prompt) <= MAX_TOKENS
            and 1 <= int(output) <= MAX_TOKENS):
        raise UsageError(f"--traffic lengths={text}: PROMPT/OUTPUT tokens, whole numbers 1 to {MAX_TOKENS} "
                         "(1024/128)")
    return int(prompt), int(output)


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        rate = 0.0
    if not MIN_RATE <= rate <= MAX_RATE:  # as bench's --request-rate
        raise UsageError(f"--traffic rate={text}: requests per second, {MIN_RATE:g} to {MAX_RATE:g}")
    return rate
