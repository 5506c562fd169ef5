"""`deployctl bench static|dynamic SPEC|URL`: load an OpenAI-compatible endpoint, report, gate on a baseline."""

from __future__ import annotations

import json
from contextlib import ExitStack, contextmanager
from pathlib import Path

from deployctl.errors import ExitStatus, UsageError

STATIC_DEFAULT_PROMPT = (1024, 2048)  # the vendor's defaults (seed 000)
STATIC_DEFAULT_OUTPUT = (128, 256)


def run(args, ui) -> int:
    from deployctl.bench.runner import BenchSettings, dynamic_runs, static_runs
    from deployctl.bench.target import resolve, served_model

    mode = args.bench_mode
    runs = _runs(args, mode, static_runs, dynamic_runs) if mode != "search" else None
    search = _search_plan(args) if mode == "search" else None
    slos = parse_slo_flag(args.slo)  # each number's own bounds were checked by the parser (cli_numbers)
    if args.prefix_share and getattr(args, "dataset", None):
        raise UsageError("--prefix-share shapes synthetic prompts: it does not go with --dataset")
    baseline = _read_baseline(args.baseline) if args.baseline else None
    target = resolve(args.target)
    tokenizer = None
    if args.tokenizer:
        from deployctl.bench.tokens import Tokenizer

        tokenizer = Tokenizer(args.tokenizer)
    dataset = None
    if mode == "dynamic" and args.dataset:
        from deployctl.bench.prompts import load_dataset

        dataset = load_dataset(args.dataset, args.dataset_type, tokenizer)
    model = args.served_model_name or target.model or served_model(target.url)
    settings = BenchSettings(bases=[target.url], model=model, endpoint=args.endpoint, warmup=args.warmup,
                             max_seconds=args.max_seconds, seed=getattr(args, "seed", 0), tokenizer=tokenizer,
                             dataset=dataset, slos=slos, prefix_share=args.prefix_share,
                             prefix_groups=args.prefix_groups)
    header = {"target": args.target, "model": model, "url": str(target.url), **target.facts}
    with telemetry(target.spec, args.telemetry_interval, ui) as sampler:
        settings.telemetry = sampler
        if search is not None:
            document = execute_search(settings, *search, header, ui)
        else:
            document = execute(settings, mode, runs, header, ui)
    return finish(document, ui, args.result_dir, baseline, args.max_regression)


@contextmanager
def telemetry(spec, interval: float, ui):
    """A sampler over SSH connections to the spec's serving hosts, or None (a URL, --telemetry-interval 0, or
    hosts that cannot be reached: the bench goes on without, saying so)."""
    if spec is None or interval <= 0:
        yield None
        return
    from deployctl.bench.sampler import TelemetrySampler
    from deployctl.errors import DeployctlError
    from deployctl.hosts import connected

    with ExitStack() as stack:
        try:
            transports = stack.enter_context(connected(spec, hosts=spec.used_hosts))
        except DeployctlError as error:
            transports = None
            ui.info(f"telemetry off: {error.message}")
        sampler = TelemetrySampler(spec, transports, interval) if transports is not None else None
        if sampler is not None:
            ui.info(f"telemetry: {', '.join(sampler.transports)} every {interval:g} s")
        yield sampler


def _search_plan(args):
    """(SearchPlan, SearchLoad) from the flags (each within its bounds already); --start by concurrency is a
    whole number of requests in flight."""
    from deployctl.bench.runner import SearchLoad
    from deployctl.bench.search import SearchPlan
    from deployctl.cli_numbers import MAX_CONCURRENCY

    start = args.start if args.start is not None else 1.0
    if args.by == "concurrency" and (start != int(start) or start > MAX_CONCURRENCY):
        raise UsageError(f"--start {start:g}: by concurrency, a whole number from 1 to {MAX_CONCURRENCY}")
    load = SearchLoad(args.prompt_tokens or STATIC_DEFAULT_PROMPT[0], args.output_tokens or STATIC_DEFAULT_OUTPUT[0],
                      epochs=args.epochs, run_seconds=args.run_seconds)
    return SearchPlan(args.by, start, max_runs=args.max_runs, precision=args.precision), load


def execute_search(settings, plan, load, header: dict, ui) -> dict:
    """The search, a progress line per run and the answer on stderr."""
    from deployctl.bench.report import run_key, slo_verdict
    from deployctl.bench.runner import run_search

    key = run_key("static" if plan.by == "concurrency" else "dynamic")
    ui.info(f"bench search by {plan.by} against {header['url']} ({settings.model}): at most {plan.max_runs} runs, "
            f"SLOs {', '.join(f'{s.name} <= {s.limit_ms:g} ms' for s in settings.slos)}")

    def on_run(result: dict) -> None:
        slo = result["slo"]
        ui.info(f"  {key}={result[key]:g}: {slo_verdict(slo)}, goodput {slo['goodput_request_throughput']:.2f} "
                f"req/s ({100 * slo['goodput_share']:.0f}% of requests), {result['failed']} failed")

    document = run_search(settings, plan, load, header, on_run)
    found = document["search"]
    ui.info(f"search: {found['stopped']}; the highest {plan.by} that meets the SLOs: "
            + ("none" if found["max_meeting"] is None else f"{found['max_meeting']:g}"))
    return document


def parse_slo_flag(text):
    """`--slo` to SLOs (empty without the flag); a bad one is a usage error before any request."""
    if not text:
        return ()
    from deployctl.bench.slo import SloError, parse_slos

    try:
        return parse_slos(text)
    except SloError as error:
        raise UsageError(str(error)) from None


def execute(settings, mode: str, runs, header: dict, ui) -> dict:
    """Run the bench with one progress line per finished run on stderr."""
    from deployctl.bench.report import format_ms, run_key, slo_verdict
    from deployctl.bench.runner import run_bench

    key = run_key(mode)
    ui.info(f"bench {mode}: {len(runs)} run(s) against {header['url']} ({settings.model}, {settings.endpoint})")

    def on_run(result: dict) -> None:
        ttft = result["ttft_ms"]["p50"]
        ui.info(f"  {key}={result[key]:g} {result['prompt_tokens']}/{result['output_tokens']}: "
                f"{result['succeeded']}/{result['requests']} ok, {result['request_throughput']:.2f} req/s, "
                f"{result['output_token_throughput']:.1f} out tok/s, TTFT p50 "
                + ("-" if ttft is None else f"{format_ms(ttft)} ms")
                + (f", errors {result['errors']}" if result["errors"] else "")
                + (f", SLO {slo_verdict(result['slo'])}, goodput {result['slo']['goodput_request_throughput']:.2f} "
                   f"req/s" if "slo" in result else ""))

    return run_bench(settings, mode, runs, header, on_run)


def finish(document: dict, ui, result_dir, baseline, max_regression: float) -> int:
    """Print and write the results, apply the baseline gate, and say the exit status."""
    from deployctl.bench.report import write_results
    from deployctl.ui.bench import render_table

    if result_dir:
        written, note = write_results(document, result_dir)
        if note:
            ui.info(note)
        ui.info("wrote " + ", ".join(str(p) for p in written))
    if ui.json:
        ui.emit_json(document)
    else:
        render_table(ui.console(), document, title=_title(document))
    knee = document.get("knee")
    if knee:
        ui.info(f"knee ({knee['cause']}): {knee['explanation']}")
    status = ExitStatus.OK
    requests = sum(run["requests"] for run in document["runs"])
    if requests and not any(run["succeeded"] for run in document["runs"]):
        first_errors = next((run["errors"] for run in document["runs"] if run["errors"]), {})
        ui.info(f"every request failed: {first_errors}")
        status = ExitStatus.FAILED
    if baseline is not None and _gate(document, baseline, max_regression, ui):
        status = ExitStatus.FAILED
    return status


def _title(document: dict) -> str:
    found = document.get("search")
    if found is None:
        return f"bench {document['mode']}: {document['model']} at {document['url']}"
    best = "none" if found["max_meeting"] is None else f"{found['max_meeting']:g}"
    return (f"bench search by {found['by']}: {document['model']} at {document['url']} — highest {found['by']} "
            f"meeting the SLOs: {best} ({found['stopped']})")


def _gate(document: dict, baseline: dict, max_regression: float, ui) -> bool:
    """True when a run regressed beyond the threshold (the table goes to stderr)."""
    from deployctl.bench.baseline import compare

    regressions, matched = compare(document, baseline, max_regression)
    if not matched:
        ui.info("baseline: no run matches this bench (mode, load and token lengths); nothing compared")
        return False
    if not regressions:
        ui.info(f"baseline: {matched} run(s) compared, none regressed by more than {max_regression:g}%")
        return False
    from deployctl.ui.bench import render_regressions

    render_regressions(ui, regressions, max_regression)
    return True


def _runs(args, mode: str, static_runs, dynamic_runs) -> list:
    prompt_tokens, output_tokens = args.prompt_tokens, args.output_tokens
    if mode == "static":
        prompt_tokens = prompt_tokens or list(STATIC_DEFAULT_PROMPT)
        output_tokens = output_tokens or list(STATIC_DEFAULT_OUTPUT)
        if len(prompt_tokens) != len(output_tokens):
            raise UsageError(f"--prompt-tokens has {len(prompt_tokens)} value(s) and --output-tokens "
                             f"{len(output_tokens)}: they are paired position by position")
        return static_runs(args.parallel_num, prompt_tokens, output_tokens, args.epochs)
    if len(args.request_rate) != len(args.num_prompts):
        raise UsageError(f"--request-rate has {len(args.request_rate)} value(s) and --num-prompts "
                         f"{len(args.num_prompts)}: they are paired position by position")
    if args.dataset:
        if prompt_tokens:
            raise UsageError("--prompt-tokens and --dataset exclude each other (the dataset gives the prompts)")
        if output_tokens and len(output_tokens) != 1:
            raise UsageError("with --dataset, --output-tokens takes one value (it overrides the dataset's)")
        return dynamic_runs(args.request_rate, args.num_prompts, None, output_tokens[0] if output_tokens else None)
    if not prompt_tokens or not output_tokens or len(prompt_tokens) != 1 or len(output_tokens) != 1:
        raise UsageError("dynamic needs --dataset FILE, or one --prompt-tokens N and one --output-tokens M "
                         "for synthetic prompts")
    return dynamic_runs(args.request_rate, args.num_prompts, prompt_tokens[0], output_tokens[0])


def _read_baseline(path: str) -> dict:
    try:
        doc = json.loads(Path(path).expanduser().read_text())
    except OSError as exc:
        raise UsageError(f"--baseline {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # not UTF-8 or not JSON (a truncated write), or nested past limits
        raise UsageError(f"--baseline {path}: not JSON: {exc}") from None
    from deployctl.bench.baseline import baseline_problem

    problem = baseline_problem(doc)
    if problem:
        raise UsageError(f"--baseline {path}: {problem}",
                         hint="compare with a document `deployctl bench -o json` wrote, or run without --baseline")
    return doc


def bench_after_up(spec, endpoint: str, ui) -> int:
    """`up --bench`: a short static bench of the new endpoint (concurrency 1 and 4, 128/32 tokens)."""
    from deployctl.bench.client import BaseUrl
    from deployctl.bench.runner import BenchSettings, static_runs
    from deployctl.bench.target import spec_facts

    settings = BenchSettings(bases=[BaseUrl.parse(endpoint)], model=spec.model.served_name, warmup=1)
    header = {"target": str(spec.source or spec.name), "model": spec.model.served_name, "url": endpoint,
              **spec_facts(spec)}
    document = execute(settings, "static", static_runs([1, 4], [128], [32], 2), header, ui)
    if not ui.json:
        from deployctl.ui.bench import render_table

        render_table(ui.console(), document, title=f"bench after up: {spec.name} at {endpoint}")
    if not any(run["succeeded"] for run in document["runs"]):
        ui.info("bench after up: every request failed")
        return ExitStatus.FAILED
    return ExitStatus.OK
