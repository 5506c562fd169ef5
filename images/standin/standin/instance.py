"""An inference instance (mixed, prefill or decode): deterministic tokens on a TTFT/TPOT schedule, each request
holding a slot of the emulated KV cache of one engine while it generates. A server fronting several DP engines
(vLLM's internal DP launch) has one cache per engine and places each request as vLLM's DP load balancer does."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator, Optional, Sequence, Tuple

from standin.app import Engine
from standin.config import Knobs
from standin.generation import (DONE_EVENT, GenRequest, finish_reason, full_body, role_event, token_event,
                                tokens, usage_event)
from standin.httpio import LAST_CHUNK, Request, chunk, json_response, stream_head
from standin.kvcache import KvCache
from standin.trace import TraceRecord


async def sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    # Absolute deadlines: a late wake-up shortens the next wait instead of pushing every later token back.
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


class InstanceEngine(Engine):
    def __init__(self, knobs: Knobs, garbled: bool = False, max_num_seqs: Optional[int] = None,
                 engines: Sequence[str] = ("0",)) -> None:
        self.ttft_s = knobs.ttft_ms / 1000.0
        self.tpot_s = knobs.tpot_ms / 1000.0
        self.garbled = garbled  # its HCCL runs without hccn.conf: every answer has wrong tokens
        # (engine index as vLLM labels it, that engine's KV cache): each DP engine has its own cache
        self.caches: Tuple[Tuple[str, KvCache], ...] = tuple(
            (index, KvCache(knobs.capacity, knobs.load_slowdown, max_num_seqs)) for index in engines)

    @property
    def cache(self) -> KvCache:
        return self.caches[0][1]

    def place(self) -> KvCache:
        """The engine a new request goes to: as vLLM's DPLBAsyncMPClient.get_core_engine_for_request, the one
        with the lowest waiting x 4 + running (0.23.0 vllm/v1/engine/core_client.py:1408-1418), first on ties."""
        return min((cache for _, cache in self.caches), key=lambda c: c.waiting * 4 + c.running)

    async def healthy(self) -> bool:
        return True

    async def hang(self, gen: GenRequest) -> None:
        """Never answer, holding a KV cache slot (or waiting for one) as a request scheduled into a batch whose
        engine is stuck in a collective does: vLLM's gauges keep it running while no token comes."""
        cache = self.place()
        await cache.admit()
        try:
            cache.prompt_tokens += gen.prompt_tokens
            await asyncio.Event().wait()
        finally:
            cache.release()

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter, garbled: bool = False) -> None:
        await self.run(req, gen, self._answer, rid, record, writer, garbled)

    async def run(self, req: Request, gen: GenRequest, answer, *args) -> None:
        """`await answer(first, req, gen, *args)` holding a KV cache slot. `first` is the first token's deadline:
        TTFT (stretched by the load) after the slot was granted, so time spent in the queue adds to it."""
        loop = asyncio.get_running_loop()
        cache = self.place()
        waited = await cache.admit()
        try:
            cache.prompt_tokens += gen.prompt_tokens
            first = self.first_deadline(cache, loop.time() if waited else req.arrival_mono)
            await answer(first, cache, req, gen, *args)
            cache.observe(req.arrival_mono, first, loop.time(), gen.completion_tokens)
            cache.finished[finish_reason(gen)] += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            cache.finished["abort"] += 1  # the client went away
            raise
        finally:
            cache.release()

    def first_deadline(self, cache: KvCache, start: float) -> float:
        return start + self.ttft_s * cache.factor()

    def deadlines(self, cache: KvCache, first: float, count: int) -> Iterator[float]:
        """Each token's deadline, taken lazily: without a capacity token i is due at first + i * TPOT; with one
        each interval is TPOT stretched by the load at the moment the previous token was due."""
        if cache.capacity is None:
            for i in range(count):
                yield first + i * self.tpot_s
            return
        due = first
        for i in range(count):
            if i:
                due += self.tpot_s * cache.factor()
            yield due

    async def whole_answer_due(self, loop, cache: KvCache, first: float, count: int) -> None:
        """Wait until the last of `count` tokens is due, token by token, counting each as it is generated: vLLM's
        generation_tokens counter moves every engine step, whether the answer is streamed or not."""
        for due in self.deadlines(cache, first, count):
            await sleep_until(loop, due)
            cache.generation_tokens += 1

    async def _answer(self, first: float, cache: KvCache, req: Request, gen: GenRequest, rid: str,
                      record: TraceRecord, writer: asyncio.StreamWriter, garbled: bool) -> None:
        loop = asyncio.get_running_loop()
        created = int(time.time())
        words = tokens(gen.prompt, gen.completion_tokens, self.garbled or garbled)
        extra = (("x-request-id", rid),)
        if not gen.stream:
            await self.whole_answer_due(loop, cache, first, len(words))
            writer.write(json_response(200, full_body(gen, rid, created, "".join(words)), req.keep_alive, extra))
            await writer.drain()
            record.chunk_written()
            record.finish(200)
            return
        head = stream_head(200, req.keep_alive, extra)
        if gen.chat:
            head += chunk(role_event(gen, rid, created))  # sent at once: the role chunk is not the first token
        writer.write(head)
        await writer.drain()
        last = len(words) - 1
        for i, (word, due) in enumerate(zip(words, self.deadlines(cache, first, len(words)))):
            await sleep_until(loop, due)
            writer.write(chunk(token_event(gen, rid, created, word, i == last)))
            await writer.drain()
            cache.generation_tokens += 1
            record.chunk_written()
        tail = chunk(usage_event(gen, rid, created)) if gen.include_usage else b""
        writer.write(tail + chunk(DONE_EVENT) + LAST_CHUNK)
        await writer.drain()
        record.finish(200)
