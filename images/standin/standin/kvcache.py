"""The emulated KV cache (STANDIN_CAPACITY): who runs, who waits, how much slower a token gets with load, and the
counters vLLM's /metrics shows. Without a capacity it only counts: nobody waits and nothing slows down."""

from __future__ import annotations

import asyncio
import collections
from typing import Deque, Dict, Optional, Tuple

from standin.stall import EngineStall

# vLLM v1's FinishReason values, each a request_success series from start (FINISH_REASON_STRINGS, vllm/v1/engine/
# __init__.py:36; loggers.py:807-819 makes one labelled child per reason and engine)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

# vLLM 0.33.0's default bucket bounds (vllm/v1/metrics/buckets.py: TIME_TO_FIRST_TOKEN_BUCKETS,
# INTER_TOKEN_LATENCY_BUCKETS, REQUEST_LATENCY_BUCKETS), which loggers.py:831-839 gives its histograms
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
# REQUEST_LATENCY_BUCKETS: also the queue, inference, prefill and decode time histograms' (loggers.py:970-1008)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)




def request_tokens_buckets(max_model_len: int) -> Tuple[float, ...]:
    """The `request_tokens` family (vllm/v1/metrics/buckets.py build_1_2_5_buckets): 1, 2, 5, 10, 20, 50 ... up
    to max_model_len, which vllm:request_prompt_tokens and vllm:request_generation_tokens use (loggers.py:864-882)."""
    out, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(float(b) for b in out)
            out.append(mantissa * scale)
        scale *= 10


class Histogram:
    """A Prometheus histogram as prometheus_client keeps it: a count per upper bound, the sum and the count."""

    def __init__(self, bounds: Tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)  # not cumulative; render() adds them up
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        if times <= 0:
            return
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += times
                break
        self.sum += value * times
        self.count += times


class KvCache:
    def __init__(self, capacity: Optional[int], slowdown: float, max_num_seqs: Optional[int],
                 max_model_len: int = 4096) -> None:
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
        self.ttft = Histogram(TTFT_BUCKETS)  # vllm:time_to_first_token_seconds
        self.itl = Histogram(ITL_BUCKETS)  # vllm:inter_token_latency_seconds
        self.e2e = Histogram(LATENCY_BUCKETS)  # vllm:e2e_request_latency_seconds
        # a finished request's phases (vllm/v1/metrics/stats.py:593-605): queued = scheduled - queued,
        # prefill = first token - scheduled, decode = last token - first token, inference = last token - scheduled
        self.queue = Histogram(LATENCY_BUCKETS)  # vllm:request_queue_time_seconds
        self.inference = Histogram(LATENCY_BUCKETS)  # vllm:request_inference_time_seconds
        self.prefill = Histogram(LATENCY_BUCKETS)  # vllm:request_prefill_time_seconds
        self.decode = Histogram(LATENCY_BUCKETS)  # vllm:request_decode_time_seconds
        tokens_buckets = request_tokens_buckets(max_model_len)
        self.prompt_len = Histogram(tokens_buckets)  # vllm:request_prompt_tokens
        self.generation_len = Histogram(tokens_buckets)  # vllm:request_generation_tokens
        # the KV connector's lookups (vllm:external_prefix_cache_queries/_hits, loggers.py:685-706): with a
        # connector the scheduler asks it for every new request's tokens (scheduler.py:1039-1042); a decode
        # (kv_consumer) of vllm-ascend's Mooncake connector loads the whole prompt from its prefill
        # (mooncake_connector.py get_num_new_matched_tokens); without a connector both stay 0
        self.connector_queries = 0
        self.connector_hits = 0

    def observe(self, arrival: float, scheduled: float, first: float, end: float, prompt_tokens: int,
                tokens: int) -> None:
        """One finished request (seconds on the event loop's clock): TTFT to the first token's deadline, the mean
        gap between its tokens once per gap, arrival to end, its phases and its lengths."""
        self.ttft.observe(max(0.0, first - arrival))
        if tokens > 1:
            self.itl.observe(max(0.0, end - first) / (tokens - 1), tokens - 1)
        self.e2e.observe(max(0.0, end - arrival))
        self.queue.observe(max(0.0, scheduled - arrival))
        self.inference.observe(max(0.0, end - scheduled))
        self.prefill.observe(max(0.0, first - scheduled))
        self.decode.observe(max(0.0, end - first))
        self.prompt_len.observe(prompt_tokens)
        self.generation_len.observe(tokens)

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

    def batch_limit(self) -> int:
        """Sequences that may run at once: the cache's capacity, and at most --max-num-seqs, which vLLM's scheduler
        admits from its waiting queue (vllm/v1/core/sched/scheduler.py: `if len(self.running) ==
        self.max_num_running_reqs: break`, max_num_running_reqs = scheduler_config.max_num_seqs)."""
        return min(self.capacity, self.max_num_seqs) if self.max_num_seqs else self.capacity

    async def admit(self) -> bool:
        """Take a sequence slot, waiting first-come first-served while the cache (or the batch) is full; True if it
        waited. A wait for a full cache counts as a preemption: vLLM preempts (and later recomputes) sequences when
        KV blocks run out, and that is what a benchmark has to see past the capacity."""
        if self.capacity is None or (self.running < self.batch_limit() and not self._waiting):
            self.running += 1
            return False
        if self.running >= self.capacity:  # waiting for KV blocks; one held back by max_num_seqs is only queued
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
