"""The emulated KV cache (STANDIN_CAPACITY): who runs, who waits, how much slower a token gets with load, and the
counters vLLM's /metrics shows. Without a capacity it only counts: nobody waits and nothing slows down."""

from __future__ import annotations

import asyncio
import collections
from typing import Deque, Dict, Optional

from standin.stall import EngineStall

FINISH_REASONS = ("stop", "length", "abort")  # vLLM v1's FinishReason values, each a request_success series


class KvCache:
    def __init__(self, capacity: Optional[int], slowdown: float, max_num_seqs: Optional[int]) -> None:
        self.capacity = capacity
        self.slowdown = slowdown
        self.max_num_seqs = max_num_seqs
        self.running = 0
        self._waiting: Deque[asyncio.Future] = collections.deque()
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished: Dict[str, int] = {reason: 0 for reason in FINISH_REASONS}
        self.stall = EngineStall()  # closed while this engine hangs (standin/stall.py)

    @property
    def waiting(self) -> int:
        """Queued for a slot, and accepted while the engine hangs (never scheduled)."""
        return len(self._waiting) + self.stall.stuck

    def factor(self) -> float:
        """How much longer a step takes now than on an idle server: the batch shares the NPU."""
        if self.capacity is None:
            return 1.0
        return 1.0 + self.slowdown * self.running / self.capacity

    def usage(self) -> float:
        """vllm:kv_cache_usage_perc, 0..1: running sequences over what the cache (or the batch) holds."""
        limit = self.capacity or self.max_num_seqs
        return min(1.0, self.running / limit) if limit else 0.0

    async def admit(self) -> bool:
        """Take a sequence slot, waiting first-come first-served while the cache is full; True if it waited.
        Each wait counts as a preemption: vLLM preempts (and later recomputes) sequences when KV blocks run out,
        and that is what a benchmark has to see past the capacity."""
        if self.capacity is None or (self.running < self.capacity and not self._waiting):
            self.running += 1
            return False
        self.preemptions += 1
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.cancelled():
                if turn in self._waiting:  # release() may have dropped it already
                    self._waiting.remove(turn)
            else:  # the slot was handed over just before the cancel: pass it on
                self.release()
            raise
        return True

    def release(self) -> None:
        """Give the slot back; the first waiter takes it over directly, so `running` stays the same."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():  # a cancelled waiter is skipped (its task is still unwinding)
                turn.set_result(None)
                return
        self.running -= 1
