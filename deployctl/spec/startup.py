"""How long a server may take to load its model before `up` gives up and the export's start-up probe restarts it
(pure): the spec's health.startup_timeout, else a default that grows with the weights' size where the spec's
names state the parameter count."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from deployctl.spec.model import Spec

DEFAULT_S = 1200  # `up`'s budget before the spec could say (enough for a 7B-70B model on one host)
# Loading reads every weight from disk and then compiles graphs: a base for the compile, plus 2 s a GB
# (~0.5 GB/s from a node's local disk, the slow end of what vllm-ascend's multi-node runs see). A 235B W8A8 model
# (~235 GB): 1070 s, so the default; DeepSeek-V3 at bf16 (~1342 GB): 3284 s.
BASE_S = 600
S_PER_GB = 2
# `235B`, `7b`, `1.5B` as a word of a model name: its parameter count in billions ("A22B", active experts, is not)
_PARAMS = re.compile(r"(?:^|[-_./\s])(\d+(?:\.\d+)?)b(?=$|[-_./\s])")


@dataclass(frozen=True)
class StartupBudget:
    seconds: int
    why: str  # where the number comes from, for --help texts, plans and comments


def startup_budget(spec: Spec) -> StartupBudget:
    """The spec's health.startup_timeout, else max(DEFAULT_S, BASE_S + S_PER_GB x the weights' GB) when a name
    states the parameter count, else DEFAULT_S."""
    if spec.startup_timeout is not None:
        return StartupBudget(spec.startup_timeout, "health.startup_timeout")
    size = weights_gb(spec)
    if size is None:
        return StartupBudget(DEFAULT_S, "the default (the weights' size is not known)")
    seconds = max(DEFAULT_S, BASE_S + int(round(S_PER_GB * size)))
    return StartupBudget(seconds, f"{BASE_S} s + {S_PER_GB} s per GB of about {size:g} GB of weights")


def weights_gb(spec: Spec) -> Optional[float]:
    """About how many GB the weights take: the parameter count a name states (weights.dest, weights.source,
    model.served_name), 1 byte each when quantized (model.quantization), else 2 (bf16); None if none states it."""
    for text in (spec.weights.dest, spec.weights.source, spec.model.served_name):
        found = _PARAMS.search((text or "").lower())
        if found:
            return float(found.group(1)) * (1 if spec.model.quantization else 2)
    return None
