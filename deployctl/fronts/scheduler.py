"""The AscendCloud scheduler (pure): the P/D front of AscendCloud's vLLM, run by that flavour as one of its
instances (topology.scheduler). Its workers are fixed when it starts (NODE_PORTS): it cannot change its list."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from deployctl.fronts.base import AnswerTarget, FrontKind

if TYPE_CHECKING:
    from deployctl.spec.model import Instance, Spec

MAX_SCHEDULER_REQUESTS = 16  # an AscendCloud scheduler pairs round robin: lcm(P, D) requests meet every pair


SCHEDULER = "scheduler"  # its kind


class Scheduler(FrontKind):
    name = SCHEDULER
    role = "scheduler"
    own_entry = False  # topology.scheduler is one of the AscendCloud flavour's instances

    def why_fixed(self, spec: "Spec") -> str:
        return "the AscendCloud scheduler's workers are fixed when it starts (NODE_PORTS)"

    def answer_targets(self, spec: "Spec", front: "Instance") -> tuple[AnswerTarget, ...]:
        # The AscendCloud scheduler chooses the pair itself, each role round robin: lcm(P, D) requests in a row
        # meet every pairing it can choose, wherever its counters stand.
        count = min(MAX_SCHEDULER_REQUESTS,
                    math.lcm(max(1, len(spec.role("prefill"))), max(1, len(spec.role("decode")))))
        return tuple((f"{front.name} (request {k} of {count})", front, None) for k in range(1, count + 1))
