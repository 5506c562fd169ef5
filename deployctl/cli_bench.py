"""The `bench` command's options: static (the vendor's parallel waves), dynamic (Poisson arrivals) and search
(the highest load that meets the SLOs)."""

from __future__ import annotations

from deployctl.cli_numbers import number

# the same two options in every mode: static pairs the lists run by run, dynamic and search take one length
_TOKEN_HELP = {
    "static": ("prompt lengths in tokens, paired with --output-tokens (default: 1024 2048, as the vendor's)",
               "output lengths in tokens, paired with --prompt-tokens (default: 128 256, as the vendor's)"),
    "dynamic": ("synthetic prompt length in tokens (one value; default: none, then --dataset is needed)",
                "output length in tokens (one value; with --dataset it overrides the dataset's; default: none)"),
    "search": ("synthetic prompt length in tokens of every run (default: 1024)",
               "output length in tokens of every run (default: 128)"),
}
_EXAMPLES = (
    ("static", "deployctl bench static http://127.0.0.1:9000 --parallel-num 1 4 8 "
               "--prompt-tokens 1024 2048 --output-tokens 128 256"),
    ("dynamic", "deployctl bench dynamic playbooks/demo-pd.yaml --request-rate 1 2 4 --num-prompts 100 100 100"),
    ("search", "deployctl bench search playbooks/demo-pd.yaml --slo ttft_p99=2000ms,tpot_p99=50ms --by rate"),
)
_SUMMARY = {"static": "static load against a spec's endpoint or a base URL",
            "dynamic": "dynamic load against a spec's endpoint or a base URL",
            "search": "find the highest request rate or concurrency that meets the SLOs, in a bounded number of runs"}


def add_bench_parser(sub, verb) -> None:
    """`bench static|dynamic|search SPEC|URL ...`; `verb` makes a subcommand with its summary and example."""
    bench = sub.add_parser("bench", help="benchmark the endpoint (static or dynamic load, SLO search)",
                           description="Benchmark an OpenAI-compatible endpoint: TTFT, TPOT, ITL, E2E, throughput.")
    bench_sub = bench.add_subparsers(dest="bench_mode", metavar="MODE", required=True)
    for mode, example in _EXAMPLES:
        p = verb(bench_sub, mode, "deployctl.commands.bench:run", _SUMMARY[mode], example)
        _common(p, mode)
        if mode == "static":
            p.add_argument("--parallel-num", type=number("--parallel-num"), nargs="+", default=[1, 4, 8, 16, 32],
                           metavar="N",
                           help="concurrent requests, one run per value (default: 1 4 8 16 32)")
            p.add_argument("--epochs", type=number("--epochs"), default=5, metavar="N",
                           help="waves per run (default %(default)s, as the vendor's)")
        elif mode == "dynamic":
            p.add_argument("--request-rate", type=number("--request-rate"), nargs="+", required=True, metavar="RATE",
                           help="requests per second, one run per value (required)")
            p.add_argument("--num-prompts", type=number("--num-prompts"), nargs="+", required=True, metavar="N",
                           help="requests per run, one value per --request-rate (required)")
            p.add_argument("--dataset", metavar="FILE",
                           help="prompts from this file (default: synthetic prompts of --prompt-tokens)")
            p.add_argument("--dataset-type", choices=("sharegpt", "alpaca", "custom"), default="sharegpt",
                           help="format of --dataset (default: %(default)s)")
        else:
            _search_flags(p)
        if mode != "static":
            p.add_argument("--seed", type=number("--seed"), default=0,
                           help="seed of the random arrival times and prompt choice (default %(default)s)")


def _common(p, mode: str) -> None:
    p.add_argument("target", metavar="SPEC|URL", help="a spec (its public endpoint) or http://host:port")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="model name sent in each request (default: the spec's model.served_name, else the "
                        "first model the server lists at /v1/models)")
    p.add_argument("--tokenizer", metavar="DIR",
                   help="count tokens with this tokenizer (default: the server's usage counts)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                   help="OpenAI API to call: /v1/completions or /v1/chat/completions (default: %(default)s)")
    p.add_argument("--warmup", type=number("--warmup"), default=0, metavar="N",
                   help="requests sent and not measured before the runs (default %(default)s)")
    p.add_argument("--result-dir", metavar="DIR",
                   help=f"write bench_{mode}.json, .csv and .png here (default: print only)")
    p.add_argument("--baseline", metavar="FILE",
                   help="an earlier bench JSON document to compare with (default: no comparison)")
    p.add_argument("--max-regression", type=number("--max-regression"), default=10.0, metavar="PCT",
                   help="with --baseline: exit 1 when a metric is this many percent worse (default %(default)g)")
    prompt_help, output_help = _TOKEN_HELP[mode]
    nargs = None if mode == "search" else "+"
    p.add_argument("--prompt-tokens", type=number("--prompt-tokens"), nargs=nargs, metavar="N", help=prompt_help)
    p.add_argument("--output-tokens", type=number("--output-tokens"), nargs=nargs, metavar="N", help=output_help)
    p.add_argument("--slo", metavar="METRIC_STAT=VALUE,...", required=mode == "search",
                   help="latency targets, e.g. ttft_p99=2000ms,tpot_p99=50ms (metrics ttft tpot itl e2el; "
                        "statistics mean p50 p90 p95 p99; ms or s): each run says whether it met them, and its "
                        "goodput (the requests that met every limit themselves, per second and in tokens/s)"
                        + ("; required" if mode == "search" else ""))
    p.add_argument("--max-seconds", type=number("--max-seconds"), metavar="S",
                   help="stop sending after this long (default: no limit)")
    p.add_argument("--prefix-share", type=number("--prefix-share"), default=0.0, metavar="FRACTION",
                   help="synthetic prompts: this share of each prompt is a prefix shared by the requests of a group "
                        "(a prefix-heavy workload; default %(default)g)")
    p.add_argument("--prefix-groups", type=number("--prefix-groups"), default=1, metavar="N",
                   help="with --prefix-share: request i gets group i mod N's prefix (default %(default)s)")
    p.add_argument("--telemetry-interval", type=number("--telemetry-interval"), default=1.0, metavar="S",
                   help="with a SPEC: sample every host's npu-smi (GPU: nvidia-smi) and each engine's /metrics over "
                        "SSH every S seconds during each run (default %(default)g; 0: off)")


def _search_flags(p, max_runs: int = 12, epochs: int = 5) -> None:
    """What one bench search runs: the load it raises, its budget and stopping rule (tune runs one per candidate,
    with smaller defaults)."""
    p.add_argument("--by", choices=("rate", "concurrency"), default="rate",
                   help="what the search raises: the Poisson request rate or the concurrency of static waves "
                        "(default: %(default)s)")
    p.add_argument("--start", type=number("--start"), metavar="LOAD",
                   help="the first load tried (default: 1 req/s or concurrency 1); from there x4 until a run "
                        "misses, then halving the bracket")
    p.add_argument("--max-runs", type=number("--max-runs"), default=max_runs, metavar="N",
                   help="run budget (default %(default)s)")
    p.add_argument("--precision", type=number("--precision"), default=0.1, metavar="FRACTION",
                   help="stop when the lowest load that missed is within this fraction above the highest that "
                        "met (default %(default)g)")
    p.add_argument("--run-seconds", type=number("--run-seconds"), default=10.0, metavar="S",
                   help="rate: each run sends rate x S requests (at least 20; default %(default)g)")
    p.add_argument("--epochs", type=number("--epochs"), default=epochs, metavar="N",
                   help="concurrency: waves per run (default %(default)s)")
