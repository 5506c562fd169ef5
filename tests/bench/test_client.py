"""The client's judgement of one streamed answer, fed as bytes through a connection with no socket."""

from __future__ import annotations

import asyncio
import json

import pytest

from deployctl.bench.client import StreamConnection


class _Sink:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def answer(*events: dict) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)) + body


def judge(data: bytes):
    async def run():
        connection = StreamConnection()
        connection.connection_made(_Sink())
        future = asyncio.get_running_loop().create_future()
        connection.send(b"", "r1", False, future)
        connection.data_received(data)
        return await future
    return asyncio.run(run())


def test_a_stream_that_finishes_is_an_answer():
    record = judge(answer({"choices": [{"text": "hi", "finish_reason": None}]},
                          {"choices": [{"text": "!", "finish_reason": "length"}]}))
    assert record.ok and record.error == ""


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_stream_the_server_aborted_is_a_failure_although_it_is_a_200(reason):
    """What a vLLM >= 0.18 server stopping with --shutdown-timeout 0 sends to every request in flight."""
    record = judge(answer({"choices": [{"text": "hi", "finish_reason": None}]},
                          {"choices": [{"text": "", "finish_reason": reason}]},
                          {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}))
    assert not record.ok and record.status == 200
    assert record.error == f"the server ended the request: finish_reason {reason}"
