"""OpenAI request bodies in, vLLM-shaped response bodies out; the text is deterministic (pure)."""

from __future__ import annotations

import json
import math
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
    """An OpenAI-style error answer, shaped like vLLM's; `param`: the request field it is about."""

    def __init__(self, status: int, message: str, kind: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param

    def body(self, nested: bool = False) -> dict:
        """`nested`: vLLM >= 0.10.1's OpenAI error shape (vllm #22099; 0.32.0
        vllm/entrypoints/serve/engine/protocol.py:79-87 ErrorResponse(error=ErrorInfo)); else the older flat one."""
        if nested:
            return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
        return {"object": "error", "message": self.message, "type": self.kind, "param": None, "code": self.status}


def _invalid(modern: bool, message: str, param: str, value) -> ApiError:
    """vLLM 0.32's VLLMValidationError: a 400 whose message ends with its parameter and value (vllm/exceptions.py
    :49-56) and whose `param` is the parameter (serve/exception_handling/error_response.py:41-44)."""
    if modern:
        return ApiError(400, f"{message} (parameter={param}, value={value})", "BadRequestError", param)
    return ApiError(400, message, "BadRequestError")


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
    # vLLM 0.32's answer shapes (the fields below), with this `system_fingerprint`; None: the older shapes
    fingerprint: Optional[str] = None


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


def _is_token_ids(prompt) -> bool:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    return isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)


def parse_request(body, chat: bool, served_names, max_model_len: int, default_max_tokens: int,
                  eos_after: Optional[int], fingerprint: Optional[str] = None) -> GenRequest:
    """Check the body as vLLM does (model name, context length, sampling parameters) and say what will be
    generated. `fingerprint` set: as vLLM 0.32 does it (see _check_0_32)."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "BadRequestError")
    modern = fingerprint is not None
    model = body.get("model")
    if model not in served_names:
        if modern:  # 0.32.0 vllm/entrypoints/serve/engine/serving.py:75-84
            raise ApiError(404, f"The model `{model}` does not exist. Valid aliases: {', '.join(served_names)}.",
                           "NotFoundError", "model")
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    prompt, prompt_tokens = (_chat_prompt(body.get("messages")), None) if chat else _prompt(body)
    token_ids = not chat and _is_token_ids(body.get("prompt"))
    if prompt_tokens is None:
        prompt_tokens = len(prompt.split())
    param = "max_completion_tokens" if chat and "max_tokens" not in body else "max_tokens"
    max_tokens = body.get(param)
    if max_tokens is None:
        max_tokens = default_max_tokens
    if modern:
        max_tokens = _check_0_32(body, param, max_tokens, prompt_tokens, token_ids, max_model_len)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _invalid(modern, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
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
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")), fingerprint=fingerprint,
    )


def _check_0_32(body: dict, param: str, max_tokens, prompt_tokens: int, token_ids: bool, max_model_len: int):
    """vLLM 0.32's checks, in its order; the max_tokens to generate. A max_tokens over the context is refused
    (vllm/renderers/params.py:256-268); a prompt over it too (:517-535: a text prompt is tokenized with truncation
    at max_model_len + 1, hence "at least"); otherwise max_tokens is cut to what the context leaves, not refused
    (vllm/entrypoints/serve/utils/api_utils.py:169-205 get_max_tokens). Then SamplingParams._verify_args
    (vllm/sampling_params.py:650-690) checks temperature, top_p and max_tokens."""
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > max_model_len:
        raise _invalid(True, f"{param}={max_tokens} cannot be greater than max_model_len={max_model_len}. Please "
                             "request fewer output tokens.", param, max_tokens)
    if prompt_tokens > max_model_len:
        count = max_model_len + 1 if not token_ids else prompt_tokens
        qualifier = "at least " if count == max_model_len + 1 else ""
        raise _invalid(True, f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
                             f"contains {qualifier}{count} input tokens, which exceeds this limit even without any "
                             "output tokens. Please reduce the length of the input prompt.", "input_tokens", count)
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        max_tokens = min(max_tokens, max_model_len - prompt_tokens)
    temperature = body.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        value = float(temperature)
        if not math.isfinite(value):
            raise _invalid(True, f"temperature must be a finite number, got {value}.", "temperature", value)
        if value < 0.0:
            raise _invalid(True, f"temperature must be non-negative, got {value}.", "temperature", value)
        if value > 2.0:
            raise _invalid(True, f"temperature must be in [0, 2], got {value}.", "temperature", value)
    top_p = body.get("top_p")
    if isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and not 0.0 < float(top_p) <= 1.0:
        raise _invalid(True, f"top_p must be in (0, 1], got {float(top_p)}.", "top_p", float(top_p))
    return max_tokens


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
    modern = req.fingerprint is not None
    if req.chat:
        if modern:  # 0.32.0 ChatMessage (vllm/entrypoints/openai/chat_completion/protocol.py): no tool_calls when none
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                       "function_call": None, "reasoning": None}
        else:
            message = {"role": "assistant", "content": text, "tool_calls": []}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        kind, prefix = "chat.completion", "chatcmpl-"
        if modern:
            choice.update(token_ids=None, routed_experts=None)
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        kind, prefix = "text_completion", "cmpl-"
        if modern:
            choice.update(token_ids=None, prompt_logprobs=None, prompt_token_ids=None, routed_experts=None)
    doc = {"id": prefix + rid, "object": kind, "created": created, "model": req.model, "choices": [choice]}
    if not modern:
        doc["usage"] = usage(req, aborted_after)
        return doc
    # what vLLM 0.32 writes around them (its CompletionResponse / ChatCompletionResponse, unset fields as null)
    doc.update(service_tier=None, system_fingerprint=req.fingerprint,
               usage={**usage(req, aborted_after), "prompt_tokens_details": None, "completion_tokens_details": None})
    if req.chat:
        doc.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
    doc.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    return doc


def _event(doc: dict) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode("utf-8") + b"\n\n"


def role_event(req: GenRequest, rid: str, created: int) -> bytes:
    """Chat's first chunk: the role with empty content, as vLLM sends it."""
    doc = {"id": "chatcmpl-" + rid, "object": "chat.completion.chunk", "created": created, "model": req.model,
           "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                        "finish_reason": None}]}
    if req.fingerprint is not None:  # vLLM 0.32's first chunk (chat_completion/serving.py)
        doc.update(prompt_token_ids=None, prompt_text=None)
    elif req.include_usage:
        doc["usage"] = None
    return _event(doc)


def token_event(req: GenRequest, rid: str, created: int, text: str, last: bool, reason: Optional[str] = None,
                final: bool = False) -> bytes:
    """One content chunk; the last one carries the finish reason (`reason` overrides it: "abort"). `final`: the
    stream's last chunk before [DONE] (vLLM 0.32 puts its system_fingerprint there)."""
    reason = reason or (finish_reason(req) if last else None)
    modern = req.fingerprint is not None
    if req.chat:
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": reason}
        if modern:
            if reason is not None:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        doc = {"id": "chatcmpl-" + rid, "object": "chat.completion.chunk", "created": created, "model": req.model,
               "choices": [choice]}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        if modern:
            choice.update(prompt_token_ids=None, token_ids=None)
        doc = {"id": "cmpl-" + rid, "object": "text_completion", "created": created, "model": req.model,
               "choices": [choice]}
    if modern:  # 0.32 writes no `usage: null` on its chunks; the fingerprint on the stream's last one
        if final:
            doc["system_fingerprint"] = req.fingerprint
    elif req.include_usage:
        doc["usage"] = None
    return _event(doc)


def usage_event(req: GenRequest, rid: str, created: int, completion_tokens: Optional[int] = None) -> bytes:
    """The extra last chunk of `stream_options.include_usage`: no choices, only usage."""
    if req.chat:
        rid, kind = "chatcmpl-" + rid, "chat.completion.chunk"
    else:
        rid, kind = "cmpl-" + rid, "text_completion"
    doc = {"id": rid, "object": kind, "created": created, "model": req.model, "choices": [],
           "usage": usage(req, completion_tokens)}
    if req.fingerprint is not None:
        doc["system_fingerprint"] = req.fingerprint
    return _event(doc)


DONE_EVENT = b"data: [DONE]\n\n"
