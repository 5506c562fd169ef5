"""An inference instance (mixed, prefill or decode): deterministic tokens on a TTFT/TPOT schedule."""

from __future__ import annotations

import asyncio
import time

from standin.app import Engine
from standin.config import Knobs
from standin.generation import (DONE_EVENT, GenRequest, full_body, role_event, token_event, tokens,
                                usage_event)
from standin.httpio import LAST_CHUNK, Request, chunk, json_response, stream_head
from standin.trace import TraceRecord


async def sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    # Absolute deadlines: a late wake-up shortens the next wait instead of pushing every later token back.
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


class InstanceEngine(Engine):
    def __init__(self, knobs: Knobs, garbled: bool = False) -> None:
        self.ttft_s = knobs.ttft_ms / 1000.0
        self.tpot_s = knobs.tpot_ms / 1000.0
        self.garbled = garbled  # its HCCL runs without hccn.conf: every answer has wrong tokens

    async def healthy(self) -> bool:
        return True

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter, garbled: bool = False) -> None:
        loop = asyncio.get_running_loop()
        created = int(time.time())
        words = tokens(gen.prompt, gen.completion_tokens, self.garbled or garbled)
        first = req.arrival_mono + self.ttft_s  # token i is due at first + i * TPOT
        extra = (("x-request-id", rid),)
        if not gen.stream:
            await sleep_until(loop, first + self.tpot_s * (len(words) - 1))
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
        for i, word in enumerate(words):
            await sleep_until(loop, first + i * self.tpot_s)
            writer.write(chunk(token_event(gen, rid, created, word, i == last)))
            await writer.drain()
            record.chunk_written()
        tail = chunk(usage_event(gen, rid, created)) if gen.include_usage else b""
        writer.write(tail + chunk(DONE_EVENT) + LAST_CHUNK)
        await writer.drain()
        record.finish(200)
