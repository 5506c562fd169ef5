"""OpenAI request bodies in, vLLM-shaped response bodies out; the text is deterministic (pure)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import List, Optional, Tuple

# 64 short words: token i of a reply is one of them, chosen from i and the prompt's CRC32.
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu red orange yellow green blue indigo "
    "violet north south east west river stone cloud rain snow wind fire earth metal wood light shadow "
    "morning evening spring summer autumn winter apple pear plum cherry lemon olive"
).split()


class ApiError(Exception):
    """An OpenAI-style error answer, shaped like vLLM's."""

    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind

    def body(self) -> dict:
        return {"object": "error", "message": self.message, "type": self.kind, "param": None, "code": self.status}


@dataclass(frozen=True)
class GenRequest:
    chat: bool
    model: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    completion_tokens: int  # what will be generated: max_tokens, or fewer when the stand-in "emits EOS"
    stream: bool
    include_usage: bool


def _chat_prompt(messages) -> str:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", "BadRequestError")
    parts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _prompt(body) -> Tuple[str, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, len(prompt.split())
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    raise ApiError(400, "prompt must be a string or a list of token ids (one prompt per request)", "BadRequestError")


def parse_request(body, chat: bool, served_names, max_model_len: int, default_max_tokens: int,
                  eos_after: Optional[int]) -> GenRequest:
    """Check the body as vLLM does (model name, context length) and say what will be generated."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "BadRequestError")
    model = body.get("model")
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    prompt, prompt_tokens = (_chat_prompt(body.get("messages")), None) if chat else _prompt(body)
    if prompt_tokens is None:
        prompt_tokens = len(prompt.split())
    max_tokens = body.get("max_completion_tokens") if chat and "max_tokens" not in body else body.get("max_tokens")
    if max_tokens is None:
        max_tokens = default_max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError")
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, you "
                            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                            f"{max_tokens} in the completion). Please reduce the length of the messages or "
                            "completion.", "BadRequestError")
    completion_tokens = max_tokens
    if eos_after is not None and not body.get("ignore_eos"):
        completion_tokens = max(1, min(max_tokens, eos_after))
    options = body.get("stream_options")
    return GenRequest(
        chat=chat, model=model, prompt=prompt, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
        completion_tokens=completion_tokens, stream=bool(body.get("stream")),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
    )


def tokens(prompt: str, count: int, garbled: bool = False) -> List[str]:
    """The reply's tokens, each a word with its leading space (as a detokenizer would give them); `garbled`:
    other words for the same prompt, what HCCL without its NIC table (or a corrupt KV transfer) produces."""
    seed = zlib.crc32(prompt.encode("utf-8")) ^ (0x5A5A5A5A if garbled else 0)
    return [" " + WORDS[((seed + i * 2654435761) >> 7) % len(WORDS)] for i in range(count)]


def finish_reason(req: GenRequest) -> str:
    return "length" if req.completion_tokens == req.max_tokens else "stop"


ABORT = "abort"  # vLLM's finish reason for a request aborted by the engine (e.g. on SIGTERM, standin/drain.py)


def usage(req: GenRequest, completion_tokens: Optional[int] = None) -> dict:
    """`completion_tokens`: fewer than planned when the request was aborted."""
    done = req.completion_tokens if completion_tokens is None else completion_tokens
    return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + done,
            "completion_tokens": done}


def full_body(req: GenRequest, rid: str, created: int, text: str, aborted_after: Optional[int] = None) -> dict:
    """The non-streaming answer; `aborted_after`: the tokens generated before an abort (finish_reason "abort")."""
    reason = finish_reason(req) if aborted_after is None else ABORT
    if req.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                  "logprobs": None, "finish_reason": reason, "stop_reason": None}
        kind, prefix = "chat.completion", "chatcmpl-"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        kind, prefix = "text_completion", "cmpl-"
    return {"id": prefix + rid, "object": kind, "created": created, "model": req.model,
            "choices": [choice], "usage": usage(req, aborted_after)}


def _event(doc: dict) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode("utf-8") + b"\n\n"


def role_event(req: GenRequest, rid: str, created: int) -> bytes:
    """Chat's first chunk: the role with empty content, as vLLM sends it."""
    doc = {"id": "chatcmpl-" + rid, "object": "chat.completion.chunk", "created": created, "model": req.model,
           "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                        "finish_reason": None}]}
    if req.include_usage:
        doc["usage"] = None
    return _event(doc)


def token_event(req: GenRequest, rid: str, created: int, text: str, last: bool, reason: Optional[str] = None) -> bytes:
    """One content chunk; the last one carries the finish reason (`reason` overrides it: "abort")."""
    reason = reason or (finish_reason(req) if last else None)
    if req.chat:
        doc = {"id": "chatcmpl-" + rid, "object": "chat.completion.chunk", "created": created, "model": req.model,
               "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": reason}]}
    else:
        doc = {"id": "cmpl-" + rid, "object": "text_completion", "created": created, "model": req.model,
               "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                            "stop_reason": None}]}
    if req.include_usage:
        doc["usage"] = None
    return _event(doc)


def usage_event(req: GenRequest, rid: str, created: int, completion_tokens: Optional[int] = None) -> bytes:
    """The extra last chunk of `stream_options.include_usage`: no choices, only usage."""
    if req.chat:
        rid, kind = "chatcmpl-" + rid, "chat.completion.chunk"
    else:
        rid, kind = "cmpl-" + rid, "text_completion"
    return _event({"id": rid, "object": kind, "created": created, "model": req.model, "choices": [],
                   "usage": usage(req, completion_tokens)})


DONE_EVENT = b"data: [DONE]\n\n"
