"""Measured TTFT, TPOT, ITL and E2E agree with what the stand-in really did (its trace), within 2 ms plus however
late the stand-in's own stamps ran in that run, plus however late the client's reads that took several chunks at
once were stamped (TCP stamps a read with its last packet's time; only a busy client reads that way).

Both sides stamp wall-clock ns (time.time_ns, and the kernel's SO_TIMESTAMPNS on the client), so each
client stamp can also be set against the server's stamp of the same event, request by request (X-Request-Id).
The server stamps after its write and drain: when other work deschedules it, its stamps are late while the
kernel's receive stamps on the client are not. How late it ran is measured from its own trace (its chunk gaps
against its fixed schedule), so the comparison holds on a loaded machine and stays 2 ms tight on a quiet one.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from deployctl.bench.client import BaseUrl
from deployctl.bench.load import Sender, run_static
from deployctl.bench.metrics import RequestRecord, summarize_run
from deployctl.bench.prompts import synthetic_prompt

TOLERANCE_MS = 2.0
TOLERANCE_NS = 2_000_000
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")


def trace_record(entry: dict) -> RequestRecord:
    """The server's view of one request: from the moment it had read the request to its last write."""
    return RequestRecord(entry["id"], entry["status"] == 200, entry["arrival_ns"], entry["end_ns"],
                         tuple(entry["chunk_ns"]), status=entry["status"], prompt_tokens=entry["prompt_tokens"],
                         output_tokens=entry["completion_tokens"])


def measure(url: str, parallel: int, epochs: int, endpoint: str, output_tokens: int = 12):
    sender = Sender([BaseUrl.parse(url)], "m", endpoint)
    prompts = [synthetic_prompt(32, output_tokens, salt=i) for i in range(parallel * epochs)]
    prepared = sender.prepare(prompts, f"acc-{endpoint}-{parallel}")

    async def go():
        try:
            return await run_static(sender, prepared, parallel)
        finally:
            sender.close()

    return sender.counted(asyncio.run(go()), prepared)


TPOT_MS = 8.0  # the stand-in's schedule below: a token every 8 ms


def lateness_ms(truth: list[RequestRecord]) -> float:
    """How far the stand-in's own chunk stamps strayed from its schedule in this run (0 on a quiet machine)."""
    gaps = [(b - a) / 1e6 for t in truth for a, b in zip(t.chunk_ns, t.chunk_ns[1:])]
    return max((abs(g - TPOT_MS) for g in gaps), default=0.0)


def read_together(stamps) -> list[range]:
    """The chunks that one read of the socket took: consecutive chunks with the same kernel stamp. A client that
    reads late (its CPU busy elsewhere) takes several chunks at once, and TCP stamps a read with the time of its
    last packet: every chunk of the read carries that time."""
    groups, start = [], 0
    for i in range(1, len(stamps) + 1):
        if i == len(stamps) or stamps[i] != stamps[start]:
            groups.append(range(start, i))
            start = i
    return groups


def read_late_ms(records: list[RequestRecord], truth: list[RequestRecord]) -> float:
    """How much later than their own arrival chunks read together were stamped in this run (0 when the client
    read each chunk as it came, as on a quiet machine): the client side's counterpart of lateness_ms."""
    late = [(mine.chunk_ns[i] - theirs.chunk_ns[i]) / 1e6 for mine, theirs in zip(records, truth)
            for group in read_together(mine.chunk_ns) if len(group) > 1 for i in group]
    return max(late, default=0.0)


def assert_close(measured: dict, real: dict, metrics, slack_ms: float = 0.0) -> None:
    for metric in metrics:
        for key in ("p50", "p99"):
            assert abs(measured[metric][key] - real[metric][key]) <= TOLERANCE_MS + slack_ms, (
                metric, key, slack_ms, measured[metric], real[metric])


def from_client_sent(records: list[RequestRecord], truth: list[RequestRecord]) -> list[RequestRecord]:
    """The trace measured from when the client sent each request: a server descheduled before reading a
    request stamps its arrival late, yet the client really waited from its send."""
    return [replace(t, sent_ns=min(t.sent_ns, r.sent_ns)) for r, t in zip(records, truth)]


def run_against_trace(standin, parallel, epochs, endpoint):
    server = standin(ttft_ms=40, tpot_ms=int(TPOT_MS))
    records = measure(server.url, parallel, epochs, endpoint)
    assert [r.error for r in records] == [""] * (parallel * epochs)
    trace = server.trace()
    truth = [trace_record(trace[r.request_id]) for r in records]
    for mine, theirs in zip(records, truth):
        assert mine.output_tokens == theirs.output_tokens == 12
        assert len(mine.chunk_ns) == len(theirs.chunk_ns) == 12
        # every read is stamped when its bytes arrived, never later than the server's own stamp of the last chunk
        # in it (taken after its write and drain; a descheduled server stamps late, so the check is one-sided)
        reads = read_together(mine.chunk_ns)
        assert all(mine.chunk_ns[g[0]] - theirs.chunk_ns[g[-1]] <= TOLERANCE_NS for g in reads), (
            [a - b for a, b in zip(mine.chunk_ns, theirs.chunk_ns)], [len(g) for g in reads])
        assert mine.end_ns - theirs.end_ns <= TOLERANCE_NS
        # "sent" is stamped before the request leaves: no answer can be stamped earlier (TTFT is never negative)
        assert mine.sent_ns <= mine.chunk_ns[0], (mine.sent_ns, mine.chunk_ns[0])
    return records, truth


def twice(check):
    """The trace's own stamps are late when other work on this 2-core machine deschedules the stand-in:
    one fresh second measurement is allowed; both must disagree for the test to fail."""
    try:
        check()
    except AssertionError:
        check()


@pytest.mark.parametrize("parallel,epochs,endpoint", [(1, 8, "completions"), (8, 3, "chat")])
def test_latencies_match_the_server_trace(standin, parallel, epochs, endpoint):
    def check():
        records, truth = run_against_trace(standin, parallel, epochs, endpoint)
        real = summarize_run(truth)
        assert_close(summarize_run(records), summarize_run(from_client_sent(records, truth)), METRICS,
                     lateness_ms(truth) + read_late_ms(records, truth))
        # the stand-in kept its schedule (40 ms, then 8 ms a token): never early; the upper bounds, 100 times the
        # schedule, only catch a schedule not followed at all or a unit slip, never a busy machine's late wake-ups
        assert 39 <= real["ttft_ms"]["p50"] < 4000 and 7 <= real["tpot_ms"]["p50"] < 800

    twice(check)


def test_latencies_match_the_server_trace_at_64(standin):
    # A Python stand-in needs ~60 us of CPU to read one request, so in a burst of 64 on this 2-core machine
    # the last request is read 3-5 ms after the client wrote it. The client really waits that long (it is in
    # TTFT and E2E), but the trace's arrival stamp misses it. So TPOT and ITL are compared as they are, and
    # TTFT/E2E against the trace with each request's read delay (server arrival - client sent) added back.
    def check():
        records, truth = run_against_trace(standin, 64, 1, "completions")
        slack = lateness_ms(truth) + read_late_ms(records, truth)
        assert_close(summarize_run(records), summarize_run(truth), ("tpot_ms", "itl_ms"), slack)
        assert_close(summarize_run(records), summarize_run(from_client_sent(records, truth)), METRICS, slack)

    twice(check)
