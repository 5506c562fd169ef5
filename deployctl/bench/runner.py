"""Runs a whole bench (warm-up, then every run in order) and assembles the `bench` JSON document."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from deployctl.bench.client import BaseUrl
from deployctl.bench.load import Sender, poisson_offsets, run_poisson, run_static
from deployctl.bench.metrics import summarize_run
from deployctl.bench.prompts import Prompt, sample_prompts, shared_prefix, synthetic_prompt
from deployctl.bench.knee import explain_knee
from deployctl.bench.search import Probe, SearchPlan, decide
from deployctl.bench.slo import Slo, slo_result
from deployctl.bench.telemetry import summarize_telemetry
from deployctl.bench.tokens import Tokenizer


@dataclass(frozen=True)
class StaticRun:
    parallel_num: int
    prompt_tokens: int
    output_tokens: int
    epochs: int


@dataclass(frozen=True)
class DynamicRun:
    request_rate: float
    num_prompts: int
    prompt_tokens: Optional[int]  # synthetic prompts of this length; None: from the dataset
    output_tokens: Optional[int]


def static_runs(parallel: Sequence[int], prompt_tokens: Sequence[int], output_tokens: Sequence[int],
                epochs: int) -> list[StaticRun]:
    """Token lengths paired position by position; each pair at each concurrency (pure)."""
    return [StaticRun(p, i, o, epochs) for p in parallel for i, o in zip(prompt_tokens, output_tokens)]


def dynamic_runs(rates: Sequence[float], counts: Sequence[int], prompt_tokens: Optional[int],
                 output_tokens: Optional[int]) -> list[DynamicRun]:
    return [DynamicRun(r, n, prompt_tokens, output_tokens) for r, n in zip(rates, counts)]


@dataclass
class BenchSettings:
    bases: Sequence[BaseUrl]
    model: str
    endpoint: str = "completions"
    warmup: int = 0
    max_seconds: Optional[float] = None
    seed: int = 0
    timeout: Optional[float] = None
    tokenizer: Optional[Tokenizer] = None
    dataset: Optional[list[Prompt]] = None
    slos: tuple[Slo, ...] = ()  # each run reports whether it met them, and its goodput
    prefix_share: float = 0.0  # synthetic prompts: this share of each prompt is a prefix shared within a group
    prefix_groups: int = 1
    telemetry: Optional[Any] = None  # a TelemetrySampler: the hosts sampled during each run


def run_bench(settings: BenchSettings, mode: str, runs: Sequence, header: dict,
              on_run: Optional[Callable[[dict], None]] = None) -> dict:
    """The `bench` document; `on_run(result)` is called as each run completes (the live table)."""
    return asyncio.run(_run_all(settings, mode, runs, header, on_run))


async def _run_all(settings: BenchSettings, mode: str, runs: Sequence, header: dict, on_run) -> dict:
    sender = Sender(settings.bases, settings.model, settings.endpoint, settings.timeout, settings.tokenizer)
    results = []
    try:
        await _warm_up(sender, settings, runs[0])
        for index, run in enumerate(runs):
            result = await _one(sender, settings, mode, run, index)
            results.append(result)
            if on_run is not None:
                on_run(result)
    finally:
        sender.close()
    return _document(header, mode, settings, results)


def _document(header: dict, mode: str, settings: BenchSettings, results: list) -> dict:
    document = {**header, "mode": mode, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "endpoint": settings.endpoint, "runs": results}
    document["knee"] = explain_knee(document) if results else None
    return document


async def _warm_up(sender: Sender, settings: BenchSettings, first) -> None:
    if settings.warmup:
        length = getattr(first, "prompt_tokens", None) or 32
        output = getattr(first, "output_tokens", None) or 16
        warm = sender.prepare([synthetic_prompt(length, output, salt=-1 - i, tokenizer=settings.tokenizer)
                               for i in range(settings.warmup)], "warmup")
        await run_static(sender, warm, min(settings.warmup, 64))


async def _one(sender: Sender, settings: BenchSettings, mode: str, run, index: int) -> dict:
    sampler = settings.telemetry
    if sampler is not None:
        sampler.start_run()
    try:
        if mode == "static":
            result = await _static(sender, settings, run, index)
        else:
            result = await _dynamic(sender, settings, run, index)
    finally:
        samples = await asyncio.get_running_loop().run_in_executor(None, sampler.end_run) if sampler else None
    if samples is not None:
        result["telemetry"] = summarize_telemetry(samples)
        result["telemetry_samples"] = [row for sample in samples for row in sample.rows(index)]
    return result


@dataclass(frozen=True)
class SearchLoad:
    """What every run of a search sends besides its load: token lengths, and how much per run."""

    prompt_tokens: Optional[int]
    output_tokens: Optional[int]
    epochs: int = 5  # concurrency: waves per run
    run_seconds: float = 10.0  # rate: each run sends rate x this many requests
    min_requests: int = 20

    def run_at(self, by: str, load: float):
        if by == "concurrency":
            return StaticRun(int(load), self.prompt_tokens or 0, self.output_tokens or 0, self.epochs)
        return DynamicRun(load, max(self.min_requests, round(load * self.run_seconds)), self.prompt_tokens,
                          self.output_tokens)


def run_search(settings: BenchSettings, plan: SearchPlan, load: SearchLoad, header: dict,
               on_run: Optional[Callable[[dict], None]] = None) -> dict:
    """Runs chosen one after the other by bench/search.py until it answers; the document's `search` says how it
    ended, its runs are in the order they ran."""
    return asyncio.run(_search(settings, plan, load, header, on_run))


async def _search(settings: BenchSettings, plan: SearchPlan, load: SearchLoad, header: dict, on_run) -> dict:
    mode = "static" if plan.by == "concurrency" else "dynamic"
    sender = Sender(settings.bases, settings.model, settings.endpoint, settings.timeout, settings.tokenizer)
    results, probes = [], []
    try:
        verdict = decide(plan, probes)
        await _warm_up(sender, settings, load.run_at(plan.by, verdict.next_load or plan.start))
        while verdict.next_load is not None:
            result = await _one(sender, settings, mode, load.run_at(plan.by, verdict.next_load), len(results))
            results.append(result)
            probes.append(Probe(verdict.next_load, result["slo"]["met"] and not result["failed"],
                                result.get("offered_rate")))
            if on_run is not None:
                on_run(result)
            verdict = decide(plan, probes)
    finally:
        sender.close()
    document = _document(header, mode, settings, results)
    document["search"] = {"by": plan.by, "limits_ms": {s.name: s.limit_ms for s in settings.slos},
                          "max_meeting": verdict.max_meeting, "first_missing": verdict.first_missing,
                          "stopped": verdict.stopped, "runs": len(results)}
    return document


def _synthetic(settings: BenchSettings, length: int, output: int, count: int, index: int) -> list[Prompt]:
    """`count` prompts of one run; with a prefix share, request i starts with group i's shared prefix."""
    prefixes = [shared_prefix(length, settings.prefix_share, g, settings.seed) if settings.prefix_share else ()
                for g in range(max(1, settings.prefix_groups))]
    return [synthetic_prompt(length, output, salt=settings.seed * 1_000_003 + index * 100_003 + i,
                             tokenizer=settings.tokenizer, prefix=prefixes[i % len(prefixes)]) for i in range(count)]


async def _static(sender: Sender, settings: BenchSettings, run: StaticRun, index: int) -> dict:
    prompts = _synthetic(settings, run.prompt_tokens, run.output_tokens, run.parallel_num * run.epochs, index)
    prepared = sender.prepare(prompts, f"bench-s{index}")
    records = sender.counted(await run_static(sender, prepared, run.parallel_num, settings.max_seconds), prepared)
    return _with_slos(settings, records, summarize_run(
        records, parallel_num=run.parallel_num, prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
        epochs=run.epochs))


async def _dynamic(sender: Sender, settings: BenchSettings, run: DynamicRun, index: int) -> dict:
    if settings.dataset is not None:
        prompts = sample_prompts(settings.dataset, run.num_prompts, settings.seed + index, run.output_tokens)
    else:
        prompts = _synthetic(settings, run.prompt_tokens, run.output_tokens, run.num_prompts, index)
    prepared = sender.prepare(prompts, f"bench-d{index}")
    offsets = poisson_offsets(len(prepared), run.request_rate, settings.seed + index)
    raw = await run_poisson(sender, prepared, offsets, settings.max_seconds, prewarm=min(len(prepared), 64))
    records = sender.counted(raw, prepared)
    offered = _offered_rate(records, offsets, run.request_rate)
    good = [r for r in records if r.ok]
    prompt_tokens = run.prompt_tokens if run.prompt_tokens is not None else (
        round(sum(r.prompt_tokens or 0 for r in good) / len(good)) if good else None)
    output_tokens = run.output_tokens if run.output_tokens is not None else (
        round(sum(r.output_tokens or 0 for r in good) / len(good)) if good else None)
    return _with_slos(settings, records, summarize_run(
        records, request_rate=run.request_rate, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        num_prompts=run.num_prompts, offered_rate=offered))


def _offered_rate(records, offsets: Sequence[float], rate: float) -> Optional[float]:
    """The rate the client really sent at: the asked rate, scaled by how much longer sending took than the
    Poisson schedule said (a client that cannot keep up stretches it; past that it sets the pace, not the
    server). Compared with the schedule, not with the rate itself: a short Poisson run's own span varies."""
    sent = sorted(r.sent_ns for r in records)
    planned = offsets[-1] - offsets[0] if len(offsets) > 1 else 0.0
    if len(sent) < 2 or sent[-1] == sent[0] or planned <= 0:
        return None
    return rate * min(1.0, planned / ((sent[-1] - sent[0]) / 1e9))


def _with_slos(settings: BenchSettings, records, summary: dict) -> dict:
    if settings.slos:
        summary["slo"] = slo_result(records, settings.slos, summary)
    return summary
