"""The requests deployctl sends a vLLM OpenAI server (pure): the smoke request, a greedy completion, the one-token
generate that judges liveness. The flavours' defaults (servers/base.py); plan/ asks them through the flavour."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deployctl.spec.model import Spec

SMOKE_PROMPT = "Say hello in one short sentence."
ONE_TOKEN_PATH = "/v1/completions"


def smoke_request_body(spec: Spec) -> bytes:
    """`/v1/chat/completions`, temperature 0: what the runbook's curl sends."""
    return json.dumps({
        "model": spec.model.served_name,
        "messages": [{"role": "user", "content": SMOKE_PROMPT}],
        "max_tokens": 32,
        "temperature": 0,
        "stream": False,
    }).encode()


def completion_body(spec: Spec, prompt: str, max_tokens: int) -> bytes:
    """A greedy, non-streaming `/v1/completions` request (compact JSON)."""
    return json.dumps({"model": spec.model.served_name, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": False}, separators=(",", ":")).encode()


def one_token_body(spec: Spec) -> bytes:
    """The cheapest real generate: one greedy token (the hang watch of `status` and the end of `up`)."""
    return completion_body(spec, "ping", 1)
