"""The `tune` command's options: the SLOs, what to search, the budget, and the bench search run per candidate."""

from __future__ import annotations

from deployctl.cli_numbers import number

EXAMPLE = ("deployctl tune playbooks/mixed-1host-910b.yaml --slo ttft_p99=2000ms,tpot_p99=50ms --yes\n"
           "deployctl tune spec.yaml --slo ttft_p99=1s --search max_num_seqs=64,128,256 --search tp=2,4 --budget 2h")


def add_tune_parser(sub, verb) -> None:
    p = verb(sub, "tune", "deployctl.commands.tune:run",
             "find the layout and engine settings that meet latency SLOs with the most goodput per card: deploy "
             "each candidate, run bench search against it, keep the best deployed", EXAMPLE)
    p.add_argument("spec", metavar="SPEC", help="deployment spec (YAML): the starting point and the hosts")
    p.add_argument("--slo", required=True, metavar="METRIC_STAT=VALUE,...",
                   help="latency targets every candidate is measured against, e.g. ttft_p99=2000ms,tpot_p99=50ms "
                        "(as bench search's --slo; required)")
    p.add_argument("--search", action="append", default=[], metavar="KEY=V1,V2",
                   help="values to try for a key (repeatable): max_num_seqs, max_num_batched_tokens, tp, dp (narrow "
                        "the layouts) or any spec path such as model.max_model_len (default: max_num_seqs halved, as "
                        "written and doubled; max_num_batched_tokens as written and doubled; every tp x dp that fits "
                        "the hosts' cards)")
    p.add_argument("--budget", metavar="N|DURATION",
                   help="stop after N candidates, or once this long has passed (30m, 2h, 90s) (default: until "
                        "the search has no untried neighbour of the best candidate)")
    p.add_argument("--grid", action="store_true",
                   help="try every candidate the rules accept instead of searching (a deploy and a bench each: "
                        "what the search is measured against)")
    p.add_argument("--retry-failed", action="store_true",
                   help="deploy again the candidates an earlier run with the same inputs recorded as failed to start "
                        "(default: their failure is reused like a measurement; a candidate cut short by Ctrl-C is "
                        "always measured again)")
    p.add_argument("--keep-original", action="store_true",
                   help="end with the original spec deployed, not the best candidate")
    p.add_argument("--yes", "-y", action="store_true",
                   help="replace the running deployment with each candidate without asking")
    from deployctl.cli_bench import _search_flags

    _search_flags(p, max_runs=8, epochs=3)
    p.add_argument("--traffic", action="append", default=[], metavar="KEY=VALUE,...",
                   help="the traffic each candidate is measured with (repeatable): dataset=FILE (prompts and output "
                        "lengths from a ShareGPT file; dataset_type=alpaca|custom for the others, as bench dynamic's "
                        "--dataset), lengths=PROMPT/OUTPUT (synthetic prompts, as --prompt-tokens/--output-tokens), "
                        "rate=REQ_PER_S (the rate a candidate must serve within the SLOs to meet them; the fewest "
                        "cards that do then win); dataset and rate need --by rate (default: lengths=1024/128)")
    p.add_argument("--prompt-tokens", type=number("--prompt-tokens"), default=None, metavar="N",
                   help="synthetic prompt length (default 1024)")
    p.add_argument("--output-tokens", type=number("--output-tokens"), default=None, metavar="N",
                   help="output length (default 128; with a dataset, the dataset's)")
    p.add_argument("--telemetry-interval", type=number("--telemetry-interval"), default=1.0, metavar="S",
                   help="sample the hosts' devices and engines every S seconds during each run: what tells the "
                        "search which axis binds (default %(default)g; 0: off)")
    p.add_argument("--skip", default="", metavar="STAGE,...",
                   help="stages each deploy skips, as `up --skip` (default: none)")
    p.add_argument("--health-timeout", type=number("--health-timeout"), default=None, metavar="SECONDS",
                   help="how long a candidate may take to become healthy (default: as `up`)")
    from deployctl.cli import _host_key_flag

    _host_key_flag(p)
