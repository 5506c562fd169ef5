"""An inference instance (mixed, prefill or decode): deterministic tokens on a TTFT/TPOT schedule, each request
holding a slot of the emulated KV cache of one engine while it generates. A server fronting several DP engines
(vLLM's internal DP launch) has one cache per engine and places each request as vLLM's DP load balancer does."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Iterator, Optional, Sequence, Set, Tuple

from standin.app import Engine
from standin.config import Knobs
from standin.generation import (ABORT, DONE_EVENT, ApiError, GenRequest, finish_reason, full_body, role_event,
                                token_event, tokens, usage_event)
from standin.httpio import LAST_CHUNK, Request, chunk, json_response, stream_head
from standin.kvcache import KvCache
from standin.stall import CLIENT_MESSAGE, EngineDied, Stalls
from standin.trace import TraceRecord


async def sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    # Absolute deadlines: a late wake-up shortens the next wait instead of pushing every later token back.
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


class InstanceEngine(Engine):
    def __init__(self, knobs: Knobs, garbled: bool = False, max_num_seqs: Optional[int] = None,
                 engines: Sequence[str] = ("0",), max_model_len: int = 4096,
                 kv_role: Optional[str] = None) -> None:
        self.ttft_s = knobs.ttft_ms / 1000.0
        self.tpot_s = knobs.tpot_ms / 1000.0
        self.garbled = garbled  # its HCCL runs without hccn.conf: every answer has wrong tokens
        # (engine index as vLLM labels it, that engine's KV cache): each DP engine has its own cache
        self.caches: Tuple[Tuple[str, KvCache], ...] = tuple(
            (index, KvCache(knobs.capacity, knobs.load_slowdown, max_num_seqs, max_model_len)) for index in engines)
        self.kv_role = kv_role  # kv_producer | kv_consumer with a KV connector (vllm-ascend P/D), else None
        self.nested_errors = False  # vLLM >= 0.10.1's error bodies (standin/generation.py ApiError)
        self._in_flight = 0  # generation requests inside run(): queued for a slot or generating
        self.aborting = False  # set by abort_all(): every request in flight ends now with finish_reason "abort"
        self._sleepers: Set[asyncio.Future] = set()
        self.stalls = Stalls((index, cache.stall) for index, cache in self.caches)

    def in_flight(self) -> int:
        return self._in_flight

    def abort_all(self) -> None:
        """What vLLM's engine core does to its unfinished requests on shutdown without a drain timeout (or when the
        timeout ran out): finish them with FinishReason.ABORT (0.33.0 v1/engine/core.py:1718-1728)."""
        self.aborting = True
        for sleeper in list(self._sleepers):
            if not sleeper.done():
                sleeper.set_result(None)

    async def pause_until(self, loop: asyncio.AbstractEventLoop, deadline: float) -> bool:
        """Sleep until `deadline` (absolute, see sleep_until); True, possibly early, once abort_all() was called."""
        if self.aborting or deadline <= loop.time():
            return self.aborting
        waker = loop.create_future()
        timer = loop.call_at(deadline, lambda: waker.done() or waker.set_result(None))
        self._sleepers.add(waker)
        try:
            await waker
        finally:
            timer.cancel()
            self._sleepers.discard(waker)
        return self.aborting

    @property
    def cache(self) -> KvCache:
        return self.caches[0][1]

    def place(self) -> KvCache:
        """The engine a new request goes to: as vLLM's DPLBAsyncMPClient.get_core_engine_for_request, the one
        with the lowest waiting x 4 + running (0.23.0 vllm/v1/engine/core_client.py:1408-1418), first on ties."""
        return min((cache for _, cache in self.caches), key=lambda c: c.waiting * 4 + c.running)

    async def healthy(self) -> bool:
        return True

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter, garbled: bool = False) -> None:
        await self.run(req, gen, self._answer, rid, record, writer, garbled)

    async def run(self, req: Request, gen: GenRequest, answer, *args) -> None:
        """`await answer(first, req, gen, *args)` holding a KV cache slot. `first` is the first token's deadline:
        TTFT (stretched by the load) after the slot was granted, so time spent in the queue adds to it."""
        loop = asyncio.get_running_loop()
        cache = self.place()
        self._in_flight += 1
        try:
            if cache.stall.hung:  # accepted and queued; a hung engine schedules nothing
                await cache.stall.queue()
            if self.stalls.dead:
                raise EngineDied
            waited = await cache.admit()
        except BaseException:
            self._in_flight -= 1
            raise
        try:
            cache.prompt_tokens += gen.prompt_tokens
            if self.kv_role is not None:
                cache.connector_queries += gen.prompt_tokens
                cache.connector_hits += gen.prompt_tokens if self.kv_role == "kv_consumer" else 0
            scheduled = loop.time() if waited else req.arrival_mono
            first = self.first_deadline(cache, scheduled)
            reason = await answer(first, cache, req, gen, *args)
            cache.observe(req.arrival_mono, scheduled, first, loop.time(), gen.prompt_tokens, gen.completion_tokens)
            cache.finished[reason or finish_reason(gen)] += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            cache.finished["abort"] += 1  # the client went away
            raise
        finally:
            cache.release()
            self._in_flight -= 1

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

    async def whole_answer_due(self, loop, cache: KvCache, first: float, count: int, abortable: bool = False) -> int:
        """Wait until each of `count` tokens is due, counting each in `vllm:generation_tokens_total` as it is (vLLM
        counts every token the step it is generated, streamed or not: IterationStats, vllm/v1/metrics/stats.py),
        and while the engine hangs (EngineDied when its core dies meanwhile); the number of tokens generated:
        `count`, or (`abortable`) those due before abort_all()."""
        for i, due in enumerate(self.deadlines(cache, first, count)):
            if not abortable:
                await sleep_until(loop, due)
            elif await self.pause_until(loop, due):
                return i
            await self.progress(cache)
            cache.generation_tokens += 1
        return count

    async def progress(self, cache: KvCache) -> None:
        """Before a token goes out: wait while the engine hangs; EngineDied once its core died."""
        await cache.stall.progress()
        if self.stalls.dead:
            raise EngineDied

    async def _answer(self, first: float, cache: KvCache, req: Request, gen: GenRequest, rid: str,
                      record: TraceRecord, writer: asyncio.StreamWriter, garbled: bool) -> None:
        loop = asyncio.get_running_loop()
        created = int(time.time())
        words = tokens(gen.prompt, gen.completion_tokens, self.garbled or garbled)
        extra = (("x-request-id", rid),)
        if not gen.stream:
            done = await self.whole_answer_due(loop, cache, first, len(words), abortable=True)
            aborted = done if self.aborting and done < len(words) else None
            body = full_body(gen, rid, created, "".join(words[:done]), aborted)
            writer.write(json_response(200, body, req.keep_alive, extra))
            await writer.drain()
            record.chunk_written()
            record.finish(200)
            return ABORT if aborted is not None else None
        head = stream_head(200, req.keep_alive, extra)
        if gen.chat:
            head += chunk(role_event(gen, rid, created))  # sent at once: the role chunk is not the first token
        writer.write(head)
        await writer.drain()
        last = len(words) - 1
        sent = 0
        for i, (word, due) in enumerate(zip(words, self.deadlines(cache, first, len(words)))):
            if await self.pause_until(loop, due):
                break
            try:
                await self.progress(cache)
            except EngineDied:  # vLLM's stream generator sends the error as its last event, then [DONE]
                error = ApiError(500, CLIENT_MESSAGE, "InternalServerError").body(self.nested_errors)
                writer.write(chunk(b"data: " + json.dumps(error).encode() + b"\n\n") + chunk(DONE_EVENT) + LAST_CHUNK)
                await writer.drain()
                record.finish(500)
                raise
            writer.write(chunk(token_event(gen, rid, created, word, i == last, final=i == last and not gen.include_usage)))
            await writer.drain()
            cache.generation_tokens += 1
            sent += 1
            record.chunk_written()
        # aborted: vLLM's last chunk has no text and finish_reason "abort" (0.33.0
        # vllm/entrypoints/openai/completion/serving.py:393-400 sends it because finish_reason is set)
        tail = chunk(token_event(gen, rid, created, "", True, ABORT, final=not gen.include_usage)) \
            if sent < len(words) else b""
        if gen.include_usage:
            tail += chunk(usage_event(gen, rid, created, sent))
        writer.write(tail + chunk(DONE_EVENT) + LAST_CHUNK)
        await writer.drain()
        record.finish(200)
        return ABORT if sent < len(words) else None
