"""Prompts to send: synthetic text of a given length, or samples of a ShareGPT, Alpaca or custom dataset."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from deployctl.bench.tokens import Tokenizer, estimate_tokens
from deployctl.errors import UsageError

# Common short words: without a tokenizer each is about one token, and whitespace-counting servers agree.
_WORDS = (
    "the of and to in is was for on are with as at be by this had not but from or have an they which one you "
    "were all we her she there would their will when who him been has more if no out do so can what up said "
    "about other into than its time only could new them man some these then two first may any like now my "
    "such make over our even most me state after also made many did must before back see through way where "
    "get much go well your know should down work year because come people just say each those take day good"
).split()


@dataclass(frozen=True)
class Prompt:
    """One request's input: the text, its length when known before sending, and the output length to ask."""

    text: str
    output_tokens: int
    prompt_tokens: Optional[int] = None  # None: counted later (server usage, else estimate)


def shared_prefix(length: int, share: float, group: int, seed: int) -> tuple[str, ...]:
    """The words a prefix-heavy workload puts first in every prompt of a group: round(share x length) of them,
    the same for every request of the group (what a prefix cache can reuse)."""
    rng = random.Random(f"prefix-{seed}-{group}")
    return tuple(rng.choice(_WORDS) for _ in range(round(share * length)))


def synthetic_prompt(length: int, output_tokens: int, salt: int, tokenizer: Optional[Tokenizer] = None,
                     prefix: Sequence[str] = ()) -> Prompt:
    """`length` words (or exactly `length` tokens with a tokenizer), starting with `prefix`; `salt` varies the
    rest per request."""
    rng = random.Random(salt)
    words = list(prefix[:length]) + [rng.choice(_WORDS) for _ in range(max(1, length) - len(prefix[:length]))]
    text = " ".join(words)
    if tokenizer is None:
        return Prompt(text, output_tokens, None)
    ids = tokenizer.encode(text)
    while len(ids) < length:  # a tokenizer that merges words: add more text until there are enough tokens
        text += " " + " ".join(rng.choice(_WORDS) for _ in range(length))
        ids = tokenizer.encode(text)
    text = tokenizer.decode(ids[:length])
    return Prompt(text, output_tokens, tokenizer.count(text))


def load_dataset(path: str, kind: str, tokenizer: Optional[Tokenizer] = None) -> list[Prompt]:
    """Every usable prompt of a dataset file, with its output length (from the reference answer)."""
    try:
        doc = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--dataset {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--dataset {path}: not JSON: {exc}") from None
    if not isinstance(doc, list):
        raise UsageError(f"--dataset {path}: expected a JSON list of {kind} records")
    prompts = parse_dataset(doc, kind, tokenizer.count if tokenizer else estimate_tokens)
    if not prompts:
        raise UsageError(f"--dataset {path}: no usable {kind} record in it")
    return prompts


def parse_dataset(doc: list, kind: str, count) -> list[Prompt]:
    """Records to prompts (pure); `count(text)` sizes the reference answers of ShareGPT and Alpaca records."""
    prompts = []
    for record in doc:
        if not isinstance(record, dict):
            continue
        if kind == "custom":
            text, output = record.get("prompt"), record.get("output_tokens")
            if isinstance(text, str) and isinstance(output, int) and output > 0:
                prompts.append(Prompt(text, output))
        elif kind == "alpaca":
            instruction, extra, answer = record.get("instruction"), record.get("input"), record.get("output")
            if isinstance(instruction, str) and isinstance(answer, str) and answer:
                text = instruction + ("\n" + extra if isinstance(extra, str) and extra else "")
                prompts.append(Prompt(text, count(answer)))
        else:  # sharegpt: the first human turn and the reply that follows it
            turns = record.get("conversations") or record.get("conversation") or []
            if len(turns) >= 2 and all(isinstance(t, dict) for t in turns[:2]):
                text, answer = turns[0].get("value"), turns[1].get("value")
                if isinstance(text, str) and text and isinstance(answer, str) and answer:
                    prompts.append(Prompt(text, count(answer)))
    return prompts


def sample_prompts(pool: list[Prompt], count: int, seed: int, output_tokens: Optional[int] = None) -> list[Prompt]:
    """`count` prompts drawn from the pool in a seeded order (cycling if it is smaller)."""
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    picked = [pool[order[i % len(order)]] for i in range(count)]
    if output_tokens is not None:
        picked = [Prompt(p.text, output_tokens, p.prompt_tokens) for p in picked]
    return picked
