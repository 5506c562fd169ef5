"""Token counting: an optional Hugging Face `tokenizers` tokenizer (the `bench` extra), imported lazily."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from deployctl.errors import UsageError


class Tokenizer:
    """A `tokenizer.json` (a file, or a model directory holding one) loaded with the `tokenizers` package."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as HfTokenizer
        except ImportError:
            raise UsageError("--tokenizer needs the `tokenizers` package",
                             hint="pip install 'deployctl[bench]'") from None
        file = Path(path).expanduser()
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise UsageError(f"--tokenizer {path}: no tokenizer.json there")
        try:
            self._tokenizer = HfTokenizer.from_file(str(file))
        except Exception as exc:  # the library raises its own untyped errors for a bad file
            raise UsageError(f"--tokenizer {path}: cannot load {file.name}: {exc}") from None

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids)


def estimate_tokens(text: str) -> int:
    """A rough count without a tokenizer: the larger of words and characters / 4 (English-like BPE)."""
    return max(1, len(text.split()), math.ceil(len(text) / 4))


def count_prompt(prompt: str, tokenizer: Optional[Tokenizer], usage: Optional[int]) -> int:
    """The contract's order for prompt lengths: tokenizer, else the server's usage, else an estimate."""
    if tokenizer is not None:
        return tokenizer.count(prompt)
    if usage is not None:
        return usage
    return estimate_tokens(prompt)


def count_output(text: str, chunks: int, tokenizer: Optional[Tokenizer], usage: Optional[int]) -> int:
    """The contract's order for output lengths: the server's usage, else the tokenizer, else one per chunk."""
    if usage is not None:
        return usage
    if tokenizer is not None:
        return tokenizer.count(text)
    return chunks
