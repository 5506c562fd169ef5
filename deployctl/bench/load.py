"""The load shapes: static (waves of N requests at once, per epoch) and dynamic (Poisson arrivals)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from deployctl.bench.client import BaseUrl, request_bytes
from deployctl.bench.pool import ConnectionPool
from deployctl.bench.metrics import RequestRecord
from deployctl.bench.prompts import Prompt
from deployctl.bench.tokens import Tokenizer, count_output, count_prompt

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def request_body(model: str, prompt: Prompt, endpoint: str) -> dict:
    """A streamed request asking for exactly `output_tokens` tokens (EOS ignored) and the usage at the end."""
    body: dict = {"model": model}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    body.update({"max_tokens": prompt.output_tokens, "ignore_eos": True,
                 "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    return body


def poisson_offsets(count: int, rate: float, seed: int) -> list[float]:
    """Send times in seconds from the start: the first at 0, then exponential gaps of mean 1/rate (pure)."""
    if rate == float("inf"):
        return [0.0] * count
    rng = random.Random(seed)
    offsets, at = [], 0.0
    for i in range(count):
        if i:
            at += rng.expovariate(rate)
        offsets.append(at)
    return offsets


@dataclass(frozen=True)
class Prepared:
    """A request ready to write: its id, bytes and prompt (for counting afterwards)."""

    request_id: str
    data: bytes
    prompt: Prompt


class Sender:
    """Sends prepared requests over keep-alive pools (several base URLs are used round robin)."""

    def __init__(self, bases: Sequence[BaseUrl], model: str, endpoint: str, timeout: Optional[float] = None,
                 tokenizer: Optional[Tokenizer] = None) -> None:
        self.pools = [ConnectionPool(base) for base in bases]
        self.model = model
        self.endpoint = endpoint
        self.chat = endpoint == "chat"
        self.timeout = timeout
        self.tokenizer = tokenizer

    def prepare(self, prompts: Sequence[Prompt], id_prefix: str) -> list[Prepared]:
        path = PATHS[self.endpoint]
        out = []
        for i, prompt in enumerate(prompts):
            request_id = f"{id_prefix}-{i}"
            base = self.pools[i % len(self.pools)].base
            out.append(Prepared(request_id, request_bytes(base, path, request_body(self.model, prompt, self.endpoint),
                                                          request_id), prompt))
        return out

    async def prewarm(self, connections: int) -> None:
        per_pool = -(-connections // len(self.pools))
        await asyncio.gather(*(pool.prewarm(per_pool) for pool in self.pools))

    async def send(self, index: int, prepared: Prepared) -> RequestRecord:
        pool = self.pools[index % len(self.pools)]
        return await pool.request(prepared.data, prepared.request_id, self.chat, self.timeout)

    def close(self) -> None:
        for pool in self.pools:
            pool.close()

    def counted(self, records: Sequence[RequestRecord], prepared: Sequence[Prepared]) -> list[RequestRecord]:
        """Records with prompt and output token counts filled in, in the contract's order."""
        by_id = {p.request_id: p.prompt for p in prepared}
        out = []
        for record in records:
            prompt = by_id[record.request_id]
            known = prompt.prompt_tokens if self.tokenizer is not None else None
            prompt_tokens = known if known is not None else count_prompt(
                prompt.text, self.tokenizer, record.usage_prompt_tokens)
            output_tokens = count_output(record.text, len(record.chunk_ns), self.tokenizer,
                                         record.usage_completion_tokens)
            out.append(replace(record, prompt_tokens=prompt_tokens, output_tokens=output_tokens))
        return out


async def run_static(sender: Sender, prepared: Sequence[Prepared], parallel: int,
                     max_seconds: Optional[float] = None) -> list[RequestRecord]:
    """Waves of `parallel` requests sent at once; each wave waits for all of its answers (one per epoch)."""
    loop = asyncio.get_running_loop()
    await sender.prewarm(parallel)
    records: list[RequestRecord] = []
    start = loop.time()
    for wave in range(0, len(prepared), parallel):
        if max_seconds is not None and wave and loop.time() - start >= max_seconds:
            break
        batch = prepared[wave:wave + parallel]
        records.extend(await asyncio.gather(*(sender.send(wave + i, p) for i, p in enumerate(batch))))
    return records


async def run_poisson(sender: Sender, prepared: Sequence[Prepared], offsets: Sequence[float],
                      max_seconds: Optional[float] = None, prewarm: int = 0) -> list[RequestRecord]:
    """Each request is sent at its offset (late ones at once: the schedule never drifts); waits for all."""
    loop = asyncio.get_running_loop()
    if prewarm:
        await sender.prewarm(prewarm)
    tasks = []
    start = loop.time()
    for i, (item, offset) in enumerate(zip(prepared, offsets)):
        if max_seconds is not None and offset >= max_seconds:
            break
        delay = start + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(sender.send(i, item)))
    return list(await asyncio.gather(*tasks))
