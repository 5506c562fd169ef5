"""`deployctl tune SPEC --slo ...`: for each candidate the search picks, write its spec, deploy it (`up`, in this
process), run bench search against it and record the result beside the spec; a re-run reuses what is on disk; the
end state is the best candidate deployed (or the original) and its spec written next to the input."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from deployctl.errors import DeployctlError, ExitStatus, UsageError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)$")


@dataclass(frozen=True)
class Load:
    """What every candidate's bench search is measured with: the SLOs, the traffic and the dataset's prompts."""

    slos: tuple
    traffic: Any  # tune/traffic.py Traffic
    prompts: Optional[list] = None  # the dataset's, read once
    dataset_sha256: Optional[str] = None  # its content: what makes a record reusable, not the file's path


def parse_budget(text):
    """`--budget N` (candidates) or `30m` / `2h` / `90s` (wall time) -> Budget."""
    from deployctl.tune.step import Budget

    if not text:
        return Budget()
    if text.isdigit() and int(text) >= 1:
        return Budget(candidates=int(text))
    match = _DURATION.match(text.strip())
    if not match or float(match[1]) <= 0:
        raise UsageError(f"--budget {text!r}: a number of candidates (4) or a duration (90s, 30m, 2h)")
    return Budget(seconds=float(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]])


def run(args, ui) -> int:
    from deployctl.commands.bench import parse_slo_flag
    from deployctl.spec.load import load_spec
    from deployctl.spec.locate import compose_document
    from deployctl.tune.space import build_space, parse_search, rules_check

    started = time.monotonic()
    slos = parse_slo_flag(args.slo)
    load = _load(args, slos)
    search = parse_search(args.search)
    budget = parse_budget(args.budget)
    if args.by == "concurrency" and args.start is not None and args.start != int(args.start):
        raise UsageError(f"--start {args.start:g}: by concurrency, a whole number")
    spec = load_spec(args.spec)  # the original must be valid: its errors, not a candidate's, come first
    path = Path(args.spec).resolve()
    document = compose_document(path.read_text(), os.environ, str(path))
    cards, cards_from = _cards(args, ui, spec, document.data)
    space = build_space(document.data, document.references, cards, search,
                        rules_check(str(path), path.parent, os.environ))
    results = spec.state_dir / "tune"
    results.mkdir(parents=True, exist_ok=True)
    settings = {"slo": {s.name: s.limit_ms for s in slos}, "by": args.by, "start": args.start,
                "max_runs": args.max_runs, "precision": args.precision, "run_seconds": args.run_seconds,
                "epochs": args.epochs, "prompt_tokens": load.traffic.prompt_tokens,
                "output_tokens": load.traffic.output_tokens}
    traffic = load.traffic.settings(load.dataset_sha256)
    if traffic:  # only when --traffic says more than the lengths: earlier runs' records stay reusable
        settings["traffic"] = traffic
    ui.info(f"tune {spec.name}: {len(space.valid)} candidate(s) pass the spec's rules, {len(space.pruned)} pruned; "
            f"results in {results}")
    from deployctl.tune.step import grid_step, next_step

    records, order, stopped, interrupted = {}, [], "", False
    try:
        while True:
            if args.grid:
                step = grid_step(space, order, budget, time.monotonic() - started)
            else:
                step = next_step(space, records, order, budget, time.monotonic() - started)
            if step.candidate is None:
                stopped = step.reason
                break
            candidate = step.candidate
            order.append(candidate)
            records[candidate] = _measure(args, ui, spec, path, space, candidate, step.reason, results, settings,
                                          load)
    except KeyboardInterrupt:
        # Ctrl-C mid-candidate: up has rolled its own change back, or the candidate serves unmeasured; either way
        # the tune ends as it would have, on the best finished candidate, and a re-run redoes the cut one
        interrupted = True
        cut = [c for c in order if c not in records]
        order = [c for c in order if c in records]
        stopped = (f"interrupted during {cut[0].label}: not recorded, a re-run measures it" if cut
                   else "interrupted")
        ui.info(f"{stopped}; ending with the best finished candidate (or the original) deployed: Ctrl-C again "
                "leaves what runs now")
    return _finish(args, ui, spec, path, space, records, order, stopped, results, settings, interrupted,
                   (cards, cards_from))


def _load(args, slos) -> Load:
    """--traffic (with --prompt-tokens/--output-tokens and --by) checked, and its dataset read, before anything is
    deployed."""
    from deployctl.tune.traffic import parse_traffic

    traffic = parse_traffic(args.traffic, args.prompt_tokens, args.output_tokens, args.by)
    if traffic.dataset is None:
        return Load(slos, traffic)
    from deployctl.bench.prompts import load_dataset

    prompts = load_dataset(traffic.dataset, traffic.dataset_type)  # a bad file: a UsageError naming it
    return Load(slos, traffic, prompts, hashlib.sha256(Path(traffic.dataset).read_bytes()).hexdigest())


def _traffic_json(settings: dict) -> dict:
    """The traffic every candidate was measured with, for the JSON document."""
    return {"prompt_tokens": settings["prompt_tokens"], "output_tokens": settings["output_tokens"],
            **settings.get("traffic", {})}


def _cards(args, ui, spec, data) -> tuple[dict, str]:
    """Cards per serving host: requirements.cards where the spec writes it, else what the hosts' npu-smi or
    nvidia-smi count (one round trip each)."""
    from deployctl.spec.schema import written_cards
    from deployctl.tune.cards import card_budget
    from deployctl.tune.space import serving_hosts

    names = serving_hosts(data)
    facts = {}
    if written_cards(data) is None and names:
        from deployctl.facts.assemble import host_facts_from
        from deployctl.facts.probes import gpu_count_probe, npu_count_probes
        from deployctl.fanout import on_hosts
        from deployctl.gather import run_probes
        from deployctl.hosts import connect_options, connected

        probes = (gpu_count_probe(),) if spec.platform == "gpu" else npu_count_probes()
        with connected(spec, hosts=[spec.host(n) for n in names], options=connect_options(args, ui)) as transports:
            facts = on_hosts(transports, lambda t: host_facts_from(run_probes(t, probes, timeout=60), disk_path=None))
    cards, said = card_budget(data, names, facts)
    ui.info(f"cards per host: {said}")
    return cards, said


def _files(results: Path, space, candidate, settings) -> tuple[Path, Path, Path]:
    from deployctl.tune.space import inputs_digest

    stem = f"{candidate.label}-{inputs_digest(space.texts[candidate], settings)}"
    return results / f"{stem}.yaml", results / f"{stem}.json", results / f"{stem}.bench.json"


def _measure(args, ui, spec, path, space, candidate, reason, results, settings, load) -> dict:
    """The candidate's record: from disk when these inputs were measured before, else deployed and benched now."""
    from deployctl.tune.result import failed, measured, reusable

    spec_file, record_file, bench_file = _files(results, space, candidate, settings)
    known = reusable(_read(record_file), args.retry_failed)
    if known is not None:
        said = ("measured before" if known["status"] == "measured"
                else f"failed before ({known.get('error')}; --retry-failed tries it again)")
        ui.info(f"{candidate.label}: {said} ({record_file.name}), not deployed again")
        return {**known, "reason": reason, "reused": True}
    ui.info(f"{candidate.label} ({space.cards[candidate]} card(s)): {reason}")
    _write(spec_file, space.texts[candidate])
    values, cards = candidate.to_json(), space.cards[candidate]
    deployed = time.monotonic()
    try:
        candidate_spec = _deploy(args, ui, path, spec_file)
        deploy_s = time.monotonic() - deployed
        benched = time.monotonic()
        document = _bench(args, ui, candidate_spec, load)
        bench_s = time.monotonic() - benched
    except UsageError:
        raise  # a refusal (no --yes without a terminal): the same for every candidate
    except DeployctlError as error:
        ui.info(f"{candidate.label}: failed: {error.message}")
        record = failed(values, candidate.label, cards, reason, error.message, time.monotonic() - deployed)
    else:
        _write(bench_file, json.dumps(document, indent=2))
        record = {**measured(values, candidate.label, cards, reason, document, deploy_s, rate=load.traffic.rate),
                  "bench_s": bench_s}
    record = {**record, "spec_file": str(spec_file), "bench_file": str(bench_file)}
    _write(record_file, json.dumps(record, indent=2))  # as it finishes: an interrupted tune resumes from here
    return record


def _deploy(args, ui, path: Path, spec_file: Path):
    """`up` of a candidate's spec in this process, as the CLI runs it; the candidate is the same deployment (its
    state stays beside the input spec) and its relative paths are the input's."""
    from deployctl.cli import build_parser
    from deployctl.commands import up
    from deployctl.spec.load import load_spec_text
    from deployctl.ui.tune import step_ui

    spec = replace(load_spec_text(spec_file.read_text(), str(spec_file), path.parent), source=path)
    argv = ["up", str(spec_file), "--connect-timeout", str(args.connect_timeout)]
    if args.yes:
        argv.append("--yes")
    if args.skip:
        argv += ["--skip", args.skip]
    if args.health_timeout is not None:
        argv += ["--health-timeout", str(args.health_timeout)]
    if args.accept_new_host_keys:
        argv.append("--accept-new-host-keys")
    up_args = build_parser().parse_args(argv)
    up_args.loaded_spec = spec
    code = up.run(up_args, step_ui(ui))
    if code not in (ExitStatus.OK, ExitStatus.DRAIN_LEFT):
        from deployctl.errors import HostError

        raise HostError(spec.first_host.name, f"up ended with exit status {int(code)}")
    return spec


def _bench(args, ui, spec, load) -> dict:
    """bench search against the candidate: every serving instance when it has no front, else the front."""
    from deployctl.bench.target import spec_endpoint, spec_facts
    from deployctl.commands.bench import execute_search, telemetry

    if spec.front is None:
        urls = [f"http://{'127.0.0.1' if spec.host(i.host).is_local else spec.host(i.host).address}:{i.port}"
                for i in spec.api_servers]
    else:
        urls = [spec_endpoint(spec)]
    settings, plan, runs = search_inputs(args, load, urls, spec.model.served_name)
    header = {"target": str(spec.source), "model": spec.model.served_name, "url": urls[0], **spec_facts(spec)}
    with telemetry(spec, args.telemetry_interval, ui) as sampler:
        settings.telemetry = sampler
        document = execute_search(settings, plan, runs, header, ui)
    for run in document["runs"]:
        run.pop("telemetry_samples", None)  # the summary stays; the raw samples would swell every record
    return document


def search_inputs(args, load: Load, urls: list[str], model: str):
    """bench search's settings, plan and runs for one candidate: the tune's SLOs and traffic (a dataset's prompts,
    or synthetic lengths; with a rate to serve, the first run at that rate)."""
    from deployctl.bench.client import BaseUrl
    from deployctl.bench.runner import BenchSettings, SearchLoad
    from deployctl.bench.search import SearchPlan

    settings = BenchSettings(bases=[BaseUrl.parse(u) for u in urls], model=model, slos=load.slos,
                             dataset=load.prompts)
    traffic = load.traffic
    start = args.start if args.start is not None else (traffic.rate or 1.0)
    plan = SearchPlan(args.by, start, max_runs=args.max_runs, precision=args.precision)
    runs = SearchLoad(traffic.prompt_tokens, traffic.output_tokens, epochs=args.epochs, run_seconds=args.run_seconds)
    return settings, plan, runs


def _finish(args, ui, spec, path, space, records, order, stopped, results, settings, interrupted, budget) -> int:
    from deployctl.tune.result import rank

    cards, cards_from = budget
    ranked = rank([records[c] for c in order])
    best = next((r for r in ranked if r["status"] == "measured"), None)
    winner = next((c for c in order if best is not None and records[c]["label"] == best["label"]), None)
    tuned = None
    if winner is not None:
        tuned = path.with_name(f"{path.stem}.tuned.yaml")
        _write(tuned, space.texts[winner])
    ending = time.monotonic()
    if args.keep_original or winner is None:
        ui.info("deploying the original spec" + ("" if args.keep_original else " (no candidate was measured)"))
        _deploy(args, ui, path, path)
        deployed = "original"
    else:
        ui.info(f"deploying the best candidate: {winner.label}")
        _deploy(args, ui, path, _files(results, space, winner, settings)[0])
        deployed = winner.label
    document = {
        "deployment": spec.name, "spec": str(path), "results_dir": str(results), "slo": settings["slo"],
        "by": settings["by"], "traffic": _traffic_json(settings), "cards": {"per_host": cards, "from": cards_from},
        "stopped": stopped, "interrupted": interrupted, "winner": winner.label if winner else None,
        "meets_slo": bool(best and best["meets_slo"]), "deployed": deployed, "end_deploy_s": time.monotonic() - ending,
        "tuned_spec": str(tuned) if tuned else None, "measured": sum(1 for r in ranked if not r.get("reused")),
        "reused": sum(1 for r in ranked if r.get("reused")),
        "candidates": ranked, "pruned_count": len(space.pruned),
        "pruned": [{"label": p.candidate.label, "values": p.candidate.to_json(), "reason": p.reason}
                   for p in space.pruned],
    }
    from deployctl.tune.plot import pareto, tune_svg

    document["pareto"] = [r["label"] for r in pareto(ranked)]
    document["plot"] = str(results / "tune.svg")
    _write(results / "tune.svg", tune_svg(ranked, f"tune {spec.name}: goodput against cards", document["winner"]))
    _write(results / "tune.json", json.dumps(document, indent=2))
    if ui.json:
        ui.emit_json(document)
    else:
        from deployctl.ui.tune import render_tune

        render_tune(ui, document)
    if interrupted:
        return ExitStatus.INTERRUPTED
    return ExitStatus.OK if document["meets_slo"] else ExitStatus.FAILED


def _read(path: Path):
    """What an earlier run wrote for a candidate, parsed, or None (no file, or not JSON)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, text: str) -> None:
    """Written whole or not at all: an interrupt leaves the earlier file or none."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
