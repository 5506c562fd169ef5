"""The client on streams the real vLLM engine sent (tests/bench/streams/, captured from vLLM 0.32.0's CPU build
serving the tiny model of tests/testbed/real_model.py): every chunk with choices is a token, empty text or not, and
a reasoning model's thinking counts as its answer's tokens."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from deployctl.bench.client import StreamConnection
from tests.bench.test_client import _Sink

STREAMS = Path(__file__).parent / "streams"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"


def events(name: str) -> list[bytes]:
    """The recorded stream's events, each as the server framed it (`data: ...` and a blank line)."""
    return [part + b"\n\n" for part in (STREAMS / name).read_bytes().split(b"\n\n") if part.strip()]


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def judge(parts: list[bytes], chat: bool, rename: tuple[bytes, bytes] = (b"", b"")):
    """Feed one event per read, the i-th stamped at i + 1 ns, and return the record."""
    async def run():
        connection = StreamConnection()
        connection.connection_made(_Sink())
        future = asyncio.get_running_loop().create_future()
        connection.send(b"", "r1", chat, future)
        connection._received(HEAD, 0)
        for i, part in enumerate(parts):
            connection._received(chunked(part.replace(*rename) if rename[0] else part), i + 1)
        connection._received(b"0\r\n\r\n", len(parts) + 1)
        return await future
    return asyncio.run(run())


def test_a_completion_whose_every_token_is_a_special_token_is_an_answer():
    """vLLM 0.32, /v1/completions, max_tokens 16, ignore_eos: the model generated 16 special tokens, each
    streamed with text "" (skip_special_tokens). The engine finished the request (finish_reason length, usage 16);
    main counted it failed, "stream ended without any content"."""
    parts = events("vllm-0.32.0-completions-special-tokens.sse")
    docs = [json.loads(p[6:]) for p in parts if p.startswith(b"data: {")]
    assert all(c["text"] == "" for d in docs for c in d["choices"])  # the recording is what the test says
    record = judge(parts, chat=False)
    assert record.ok, record.error
    assert record.text == ""
    assert record.chunk_ns == tuple(range(1, 17))  # 16 token chunks; the usage chunk (no choices) is none
    assert record.usage_completion_tokens == 16


def test_a_reasoning_answer_cut_during_thinking_is_an_answer_timed_from_its_first_thinking_token():
    """vLLM 0.32 with --reasoning-parser deepseek_r1, /v1/chat/completions, max_tokens 16: the role chunk, then
    16 chunks of `delta.reasoning`, finish_reason length; no `delta.content` at all."""
    parts = events("vllm-0.32.0-chat-reasoning-cut.sse")
    docs = [json.loads(p[6:]) for p in parts if p.startswith(b"data: {")]
    assert sum("reasoning" in c["delta"] for d in docs for c in d["choices"]) == 16
    assert not any(c["delta"].get("content") for d in docs for c in d["choices"])
    record = judge(parts, chat=True)
    assert record.ok, record.error
    assert record.chunk_ns[0] == 2  # TTFT at the first thinking token; the role chunk (stamped 1) is no token
    assert len(record.chunk_ns) == 16
    assert record.text == ""  # only the answer's text is kept, as vLLM's own client does


def test_reasoning_under_its_name_before_vllm_renamed_it_counts_the_same():
    """Older vLLM streamed the thinking as `delta.reasoning_content` (vLLM 0.32's protocol still renames that
    field on input: vllm/entrypoints/openai/chat_completion/protocol.py)."""
    record = judge(events("vllm-0.32.0-chat-reasoning-cut.sse"), chat=True,
                   rename=(b'"reasoning":', b'"reasoning_content":'))
    assert record.ok, record.error
    assert record.chunk_ns[0] == 2 and len(record.chunk_ns) == 16


def test_a_role_chunk_alone_is_still_no_answer():
    """A stream that names the role and ends without a token is not an answer."""
    role = events("vllm-0.32.0-chat-reasoning-cut.sse")[0]
    assert b'"role":"assistant"' in role
    record = judge([role, b"data: [DONE]\n\n"], chat=True)
    assert not record.ok and record.error == "stream ended without any token"
