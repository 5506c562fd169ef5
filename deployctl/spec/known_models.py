"""The seed 000 model table: minimum cards and largest max-model-len per model, on 32 GB and 64 GB cards."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Optional

MEMORY_CLASSES = (32, 64)  # GB of HBM per card the table knows
_SEPARATORS = re.compile(r"[-_./\s]+")


@dataclass(frozen=True)
class CardLimits:
    min_cards: int
    max_model_len_k: int  # in K = 1024 tokens

    @property
    def max_model_len(self) -> int:
        return self.max_model_len_k * 1024


@dataclass(frozen=True)
class ModelLimits:
    family: str
    on_32gb: Optional[CardLimits]  # None: the model does not run on 32 GB cards
    on_64gb: Optional[CardLimits]
    aliases: tuple[str, ...] = ()

    def on(self, memory_class: int) -> Optional[CardLimits]:
        return self.on_64gb if memory_class == 64 else self.on_32gb


@functools.lru_cache(maxsize=1)
def model_table() -> dict[str, ModelLimits]:
    """The table shipped in deployctl/data/models.json, by family name."""
    text = resources.files("deployctl").joinpath("data/models.json").read_text(encoding="utf-8")
    table = {}
    for family, row in json.loads(text)["models"].items():
        limits = {size: CardLimits(**row[size]) if row.get(size) else None for size in ("32", "64")}
        table[family] = ModelLimits(family, limits["32"], limits["64"], tuple(row.get("aliases", ())))
    return table


def memory_class(npu_memory_gb: float | None) -> Optional[int]:
    """The table's card class for this much HBM: the nearest class not above it (48 -> 32); None below 32."""
    if npu_memory_gb is None:
        return None
    fitting = [size for size in MEMORY_CLASSES if size <= npu_memory_gb]
    return max(fitting) if fitting else None


def _words(text: str) -> list[str]:
    return [word for word in _SEPARATORS.split(text.lower()) if word]


def match_family(text: str) -> Optional[str]:
    """The table family named inside `text` ("Llama-2-13b-chat-hf" -> "llama2-13b"), else None.

    Words are compared with their separators removed, so "llama-2" matches "llama2"; a match must start
    and end on word boundaries, so "llama2-7b" is never found inside "llama2-70b". The longest match wins.
    """
    words = _words(text)
    compact = "".join(words)
    boundaries, offset = {0}, 0
    for word in words:
        offset += len(word)
        boundaries.add(offset)
    best: Optional[tuple[int, str]] = None
    for family, limits in model_table().items():
        for name in (family, *limits.aliases):
            key = "".join(_words(name))
            start = compact.find(key)
            while start != -1:
                if start in boundaries and start + len(key) in boundaries:
                    if best is None or len(key) > best[0]:
                        best = (len(key), family)
                    break
                start = compact.find(key, start + 1)
    return best[1] if best else None


def last_path_component(location: str) -> str:
    """`obs://bucket/models/llama2-13b/` -> `llama2-13b`."""
    return location.rstrip("/").rsplit("/", 1)[-1]


def family_for(explicit: str | None, served_name: str | None, source: str | None, dest: str | None) -> Optional[str]:
    """The family to check: explicit `model.family`, else from served_name, else from the weights' folder."""
    if explicit:
        return explicit if explicit in model_table() else None
    for text in (served_name, source and last_path_component(source), dest and last_path_component(dest)):
        found = match_family(text) if text else None
        if found:
            return found
    return None
