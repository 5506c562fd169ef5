"""The P/D scheduler: prefill once (max_tokens 1) on one instance, then relay a decode instance's answer."""

from __future__ import annotations

import asyncio
import json
from typing import List, Tuple

from standin.app import Engine, log
from standin.generation import ApiError, GenRequest
from standin.httpio import LAST_CHUNK, BadRequest, Request, chunk, json_response, response_bytes, stream_head
from standin.ranktable import PdLayout
from standin.trace import TraceRecord
from standin.upstream import Upstream

HEALTH_TIMEOUT_S = 2.0
# What a relayed SSE chunk that carries no generated text looks like (role-only, usage-only, the end).
_NOT_CONTENT = (b'"choices":[]', b"data: [DONE]")
_ROLE_ONLY = b'"delta":{"role":"assistant","content":""}'


def is_content_chunk(data: bytes) -> bool:
    return not any(marker in data for marker in _NOT_CONTENT) and _ROLE_ONLY not in data


class SchedulerEngine(Engine):
    def __init__(self, layout: PdLayout) -> None:
        self.prefill: List[Upstream] = [Upstream(b.server_ip, b.port) for b in layout.backends if b.role == "prefill"]
        self.decode: List[Upstream] = [Upstream(b.server_ip, b.port) for b in layout.backends if b.role == "decode"]
        self._next_prefill = 0
        self._next_decode = 0

    async def _backend_healthy(self, upstream: Upstream) -> bool:
        try:
            response = await asyncio.wait_for(upstream.request("GET", "/health"), HEALTH_TIMEOUT_S)
            await asyncio.wait_for(response.read(), HEALTH_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, BadRequest):
            return False
        return response.status == 200

    async def healthy(self) -> bool:
        results = await asyncio.gather(*(self._backend_healthy(u) for u in self.prefill + self.decode))
        return all(results)

    def _pick(self) -> Tuple[Upstream, Upstream]:
        prefill = self.prefill[self._next_prefill % len(self.prefill)]
        decode = self.decode[self._next_decode % len(self.decode)]
        self._next_prefill += 1
        self._next_decode += 1
        return prefill, decode

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter) -> None:
        prefill, decode = self._pick()
        record.backends = [prefill.name, decode.name]
        log(f"forward {rid} {req.path} prefill={prefill.name} decode={decode.name} stream={gen.stream}")
        extra = (("x-request-id", rid),)  # to the client and on to both backends, so traces line up
        prefill_body = {k: v for k, v in body.items() if k not in ("stream_options", "max_completion_tokens")}
        prefill_body.update(max_tokens=1, stream=False)
        try:
            try:
                answer = await prefill.request("POST", req.path, _json(prefill_body), extra)
                answer_body = await answer.read()
            except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
                raise ApiError(502, f"prefill instance {prefill.name} failed: {exc}", "BadGatewayError") from None
            if answer.status != 200:
                raise ApiError(502, f"prefill instance {prefill.name} answered {answer.status}: "
                                    f"{answer_body[:200].decode('utf-8', 'replace')}", "BadGatewayError")
            try:
                response = await decode.request("POST", req.path, _json(body), extra)
            except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
                raise ApiError(502, f"decode instance {decode.name} failed: {exc}", "BadGatewayError") from None
        except ApiError as exc:
            await answer_failure(exc, req, writer, extra, record, f"forward {rid}")
            return
        await relay(response, req, writer, extra, record, f"decode {decode.name}", rid)


async def answer_failure(exc: ApiError, req: Request, writer: asyncio.StreamWriter, extra, record: TraceRecord,
                         what: str) -> None:
    """A forwarded request that failed: said in the log, answered as vLLM's error JSON, traced."""
    log(f"{what} failed: {exc.message}")
    writer.write(json_response(exc.status, exc.body(), req.keep_alive, extra))
    await writer.drain()
    record.finish(exc.status)


async def relay(response, req: Request, writer: asyncio.StreamWriter, extra, record: TraceRecord, backend: str,
                rid: str) -> None:
    """Pass a backend's answer, streamed or not, back to the client unchanged, recording its content chunks."""
    if not response.chunked:
        data = await response.read()
        content_type = response.headers.get("content-type", "application/json")
        writer.write(response_bytes(response.status, data, req.keep_alive, content_type, extra))
        await writer.drain()
        record.chunk_written()
        record.finish(response.status)
        return
    writer.write(stream_head(response.status, req.keep_alive, extra))
    await writer.drain()
    chunks = response.chunks()
    try:
        while True:
            try:
                data = await chunks.__anext__()
            except StopAsyncIteration:
                break
            except (OSError, asyncio.IncompleteReadError) as exc:
                # The decode instance broke the stream: end ours without the last chunk, as a proxy would.
                log(f"forward {rid}: {backend} broke the stream: {exc!r}")
                record.aborted = True
                record.finish(502)
                raise ConnectionAbortedError("decode instance broke the stream") from None
            writer.write(chunk(data))
            await writer.drain()  # a client that went away raises here; App records it as aborted
            if is_content_chunk(data):
                record.chunk_written()
    finally:
        await chunks.aclose()  # closes the decode connection unless the stream was read to its end
    writer.write(LAST_CHUNK)
    await writer.drain()
    record.finish(response.status)


def _json(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")
