"""The all-pairs answer check (issue 22): one fixed temperature-0 prompt down every serving path — each mixed
instance, each prefill x decode pairing of a KV-connector P/D, the proxy or scheduler in front — must give the
same tokens. `/health` stays 200 while an instance answers wrong tokens (a container without hccn.conf,
vllm-ascend #7711) or a proxy relays empty 200s (#13140); this stage fails the deploy with the path named.
Pure: the paths, the request and the verdict on what came back."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.fronts import front_for_role
from deployctl.plan.actions import AnswerCheck
from deployctl.plan.model import Stage, Step
from deployctl.servers import flavour_of
from deployctl.servers.requests import completion_body
from deployctl.spec.model import Instance, Spec

ANSWER_PROMPT = "The quick brown fox jumps over the lazy dog. Continue the story:"
DEFAULT_ANSWER_TOKENS = 8


@dataclass(frozen=True)
class AnswerPath:
    """One way a request can be served: `url` answers it (for a P/D pair, the decode, after `prefill_url` has
    prefilled it and handed over kv_transfer_params, as vllm-ascend's proxy does; or, where the prefill has a
    `bootstrap` address, sent to both at once with that bootstrap and a room, as sglang-router does)."""

    name: str
    url: str
    body: str  # the JSON request
    prefill_url: str = ""
    bootstrap: str = ""  # `address:port` of an SGLang prefill's bootstrap server, as its decode reaches it

    def to_json(self) -> dict:
        doc = {"name": self.name, "url": self.url, "body": json.loads(self.body)}
        if self.prefill_url:
            doc["prefill_url"] = self.prefill_url
        if self.bootstrap:
            doc["bootstrap"] = self.bootstrap
        return doc


@dataclass(frozen=True)
class Answer:
    """What one path gave back: HTTP status (0: no answer), body size, the generated text (None: none found)."""

    status: int
    size: int
    text: Optional[str]
    error: str = ""


def openai_body(spec: Spec, tokens: int) -> str:
    return completion_body(spec, ANSWER_PROMPT, tokens).decode()


def answer_paths(spec: Spec, asker: str, address_of: Mapping[str, str], tokens: int) -> tuple[AnswerPath, ...]:
    """Every serving path, addressed from host `asker` (its own servers on loopback, the others by address)."""

    def url(instance: Instance, path: str) -> str:
        address = "127.0.0.1" if instance.host == asker else address_of[instance.host]
        return f"http://{address}:{instance.port}{path}"

    flavour = flavour_of(spec)
    completions = flavour.answers_path(spec)
    own = flavour.own_answer_body(ANSWER_PROMPT, tokens)
    if own is not None:  # its own generate endpoint: each server answers for itself
        return tuple(AnswerPath(i.name, url(i, completions), own) for i in spec.api_servers)
    body = openai_body(spec, tokens)
    front = spec.front
    if front is None:
        return tuple(AnswerPath(i.name, url(i, completions), body) for i in spec.api_servers)
    kind = front_for_role(front.role)
    targets = kind.answer_targets(spec, front) if kind is not None else ()
    return tuple(AnswerPath(label, url(answerer, completions), body,
                            prefill_url=url(prefill, completions) if prefill is not None else "",
                            bootstrap=(f"{address_of[prefill.host]}:{prefill.bootstrap_port}"
                                       if prefill is not None and prefill.bootstrap_port is not None else ""))
                 for label, answerer, prefill in targets)


def asking_host(spec: Spec) -> str:
    """The front's host (what clients reach), else the first API server's."""
    return (spec.front or spec.api_servers[0]).host


def plan_answers(spec: Spec, address_of: Mapping[str, str], tokens: int, timeout: float = 120.0) -> Stage:
    """One step on the asking host: every path at once, the verdict on the control machine."""
    asker = asking_host(spec)
    paths = answer_paths(spec, asker, address_of, tokens)
    check = AnswerCheck(paths, tokens, timeout)
    return Stage("answers", (Step(asker, "answers", "run", f"the same {tokens}-token temperature-0 answer on "
                                                           f"every serving path ({len(paths)})", actions=(check,)),))


def parse_answers(text: str) -> dict[str, Answer]:
    """The host program's JSON lines: one per path, by name."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            out[doc["name"]] = Answer(int(doc["status"]), int(doc["size"]), doc.get("text"), doc.get("error") or "")
        except (ValueError, KeyError, TypeError):
            continue  # a line that is not ours (a warning of the host's python): the path counts as unanswered
    return out


def _quote(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def judge_answers(paths: tuple[AnswerPath, ...], answers: Mapping[str, Answer]) -> tuple[str, ...]:
    """Each path that failed, named: no answer, an error status, a 200 with no body or no text, or tokens
    that differ from what most paths answered."""
    problems, texts = [], {}
    for path in paths:
        answer = answers.get(path.name)
        if answer is None:
            problems.append(f"{path.name}: no result came back")
        elif answer.status == 0:
            problems.append(f"{path.name}: no answer ({answer.error or 'no response'})")
        elif answer.status != 200:
            problems.append(f"{path.name}: HTTP {answer.status}" + (f" ({answer.error})" if answer.error else ""))
        elif answer.size == 0:
            problems.append(f"{path.name}: HTTP 200 with no body")
        elif not answer.text:
            problems.append(f"{path.name}: HTTP 200 without generated text")
        else:
            texts[path.name] = answer.text
    counts = Counter(texts.values())
    if len(counts) > 1:
        (common, agree), = counts.most_common(1)
        for name, text in texts.items():
            if text != common:
                problems.append(f"{name}: answered {_quote(text)} where {agree} other path(s) answered "
                                f"{_quote(common)}")
    return tuple(problems)
