# PYTHON_ARGCOMPLETE_OK
"""The command line: an argparse tree, lazy dispatch, and the one place errors are rendered.

Only the standard library is imported at module level so `deployctl --help` stays fast; each verb's
module (and rich, paramiko, boto3, ...) is imported after argv is parsed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap

from deployctl import __version__

_FORMATTER = argparse.RawDescriptionHelpFormatter


def _common(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The common flags; accepted before or after the verb."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    group = parser.add_argument_group("output")
    group.add_argument("--output", "-o", choices=("table", "json"), default=default("table"),
                       help="table for people, json for scripts (one document on stdout; default: table)")
    group.add_argument("--verbose", "-v", action="store_true", default=default(False),
                       help="say more (accepted everywhere; no command prints more with it yet)")
    group.add_argument("--quiet", "-q", action="store_true", default=default(False),
                       help="say less: no progress on stderr, only errors and the result")
    group.add_argument("--no-color", action="store_true", default=default(False),
                       help="plain text without colours (also when NO_COLOR is set)")


def _verb(sub, name: str, handler: str, summary: str, example: str, **kwargs) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name,
        help=summary,
        description=summary,
        epilog="example:\n" + textwrap.indent(example.strip(), "  "),
        formatter_class=_FORMATTER,
        **kwargs,
    )
    parser.set_defaults(handler=handler)
    _common(parser)
    return parser


def _spec_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("spec", metavar="SPEC", nargs=None if required else "?", help="deployment spec (YAML)")


def _host_key_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accept-new-host-keys", action="store_true",
                        help="trust and record keys of hosts not yet in known_hosts (never a changed key)")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up on a host that has not connected, shown its SSH banner and accepted the "
                             "key within this long (default %(default)g)")


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree (cheap: no imports beyond argparse)."""
    parser = argparse.ArgumentParser(
        prog="deployctl",
        description="Deploy vLLM inference services onto Ascend NPU and Docker hosts from one YAML spec.",
        epilog=textwrap.dedent("""\
            examples:
              deployctl validate playbooks/mixed-1host-910b.yaml
              deployctl doctor playbooks/mixed-1host-910b.yaml
              deployctl up playbooks/mixed-1host-910b.yaml --dry-run
            exit codes: 0 ok, 1 an operation failed on a host, 2 bad usage or invalid spec, 3 a check failed"""),
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"deployctl {__version__}")
    _common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _verb(sub, "validate", "deployctl.commands.validate:run",
              "load a spec, check every rule, print the derived layout (no network)",
              "deployctl validate playbooks/demo-pd.yaml --output json")
    _spec_arg(p)

    p = _verb(sub, "plan", "deployctl.commands.plan:run",
              "connect to every host over SSH, gather its facts and print every step `up` would take "
              "(changes nothing; `validate` is the offline check)",
              "deployctl plan playbooks/demo-pd.yaml\ndeployctl plan spec.yaml --skip weights")
    _spec_arg(p)
    _host_key_flag(p)
    p.add_argument("--skip", default="", metavar="STAGE,...",
                   help="plan as `up --skip` would run: stages to leave out: checks, image, weights "
                        "(comma separated; default: none)")

    p = _verb(sub, "up", "deployctl.commands.up:run",
              "bring the deployment up: checks, image, weights, ranktables, containers, health, smoke test",
              "deployctl up playbooks/demo-pd.yaml --yes\ndeployctl up spec.yaml --dry-run --skip image,weights")
    _spec_arg(p)
    p.add_argument("--dry-run", action="store_true",
                   help="connect over SSH, gather the hosts' facts and print the plan; change nothing "
                        "(`validate` is the offline check)")
    p.add_argument("--yes", "-y", action="store_true", help="replace or remove running containers without asking")
    p.add_argument("--skip", default="", metavar="STAGE,...",
                   help="stages to skip: checks, image, weights (comma separated; default: none)")
    p.add_argument("--lock-wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait this long for another deploy's lock (default %(default)g: refuse at once)")
    p.add_argument("--health-timeout", type=float, default=1200.0, metavar="SECONDS",
                   help="how long an instance may take to become healthy (default %(default)g)")
    p.add_argument("--bench", action="store_true", help="run a short static bench after a successful deploy")
    _host_key_flag(p)

    p = _verb(sub, "down", "deployctl.commands.down:run",
              "stop and remove this deployment's containers (found by label), nothing else",
              "deployctl down playbooks/demo-pd.yaml --yes")
    _spec_arg(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    _host_key_flag(p)

    p = _verb(sub, "status", "deployctl.commands.status:run",
              "per instance: host, role, devices, port, container state, health, image",
              "deployctl status playbooks/demo-pd.yaml --output json")
    _spec_arg(p)
    _host_key_flag(p)

    p = _verb(sub, "logs", "deployctl.commands.logs:run",
              "container logs, each line prefixed by its instance",
              "deployctl logs playbooks/demo-pd.yaml demo-pd-prefill-0 -f")
    _spec_arg(p)
    p.add_argument("instance", nargs="?", metavar="INSTANCE", help="container name (default: every instance)")
    p.add_argument("-f", "--follow", action="store_true", help="keep following")
    p.add_argument("--tail", type=int, default=100, metavar="N", help="lines per instance (default %(default)s)")
    _host_key_flag(p)

    p = _verb(sub, "doctor", "deployctl.commands.doctor:run",
              "check every host: NPUs, driver, docker, ip_forward, disk, HCCN (one table)",
              "deployctl doctor playbooks/demo-pd.yaml\ndeployctl doctor --host root@192.0.2.11 --fix")
    _spec_arg(p, required=False)
    p.add_argument("--host", action="append", default=[], metavar="[USER@]ADDR[:PORT]",
                   help="check this host (repeatable); without SPEC the default requirements apply (default: every host of SPEC)")
    p.add_argument("--fix", action="store_true", help="repair what is safe (ip_forward, persistently)")
    p.add_argument("--identity-file", "-i", metavar="FILE",
                   help="SSH key for --host entries (default: OpenSSH's ~/.ssh/id_ed25519, then id_rsa)")
    p.add_argument("--known-hosts", metavar="FILE",
                   help="known_hosts for --host entries (default: ~/.ssh/known_hosts)")
    _host_key_flag(p)

    rt = sub.add_parser("ranktable", help="HCCL ranktables: gen, merge, validate",
                        description="HCCL ranktables for disaggregated (prefill/decode) serving.")
    rt_sub = rt.add_subparsers(dest="ranktable_command", metavar="ACTION", required=True)
    p = _verb(rt_sub, "gen", "deployctl.commands.ranktable:gen",
              "generate ranktables: vendor-compatible on this host, or for every host of a spec",
              "deployctl ranktable gen --prefill-server-list 4,5 --decode-server-list 6,7 --api-server --save-dir ./rt\n"
              "deployctl ranktable gen playbooks/demo-pd.yaml")
    _spec_arg(p, required=False)
    p.add_argument("--prefill-server-list", nargs="+", default=[], metavar="IDS",
                   help="one item per prefill instance: comma-separated device ids (e.g. 4,5 6,7; default: none)")
    p.add_argument("--decode-server-list", nargs="+", default=[], metavar="IDS",
                   help="one item per decode instance: comma-separated device ids (default: none)")
    p.add_argument("--api-server", action="store_true", help="this host also runs the scheduler (group 0)")
    p.add_argument("--save-dir", metavar="DIR", help="where to write the files (default: .deployctl/<deployment>/ranktables/ for a SPEC)")
    p.add_argument("--host-ip", metavar="IP", help="this host's server_ip (default: detected, must be bound here)")
    p.add_argument("--cards", type=int, metavar="N",
                   help="cards on this host (device ids 0..N-1; default: `npu-smi info -l` when installed)")
    _host_key_flag(p)

    p = _verb(rt_sub, "merge", "deployctl.commands.ranktable:merge",
              "merge per-host global ranktables into global_ranktable_merge.json",
              "deployctl ranktable merge global_ranktable_192.0.2.21.json global_ranktable_192.0.2.22.json --save-dir .")
    p.add_argument("files", nargs="*", metavar="FILE", help="per-host global ranktables, in order")
    p.add_argument("--global-ranktable-list", nargs="+", default=[], metavar="FILE",
                   help="same as the positional files (the vendor tool's flag; default: none)")
    p.add_argument("--save-dir", metavar="DIR", default=".",
                   help="where to write global_ranktable_merge.json (default: %(default)s, the current directory)")

    p = _verb(rt_sub, "validate", "deployctl.commands.ranktable:validate",
              "check ranktable files against every rule of the format",
              "deployctl ranktable validate global_ranktable_merge.json --complete")
    p.add_argument("files", nargs="+", metavar="FILE", help="ranktable JSON files")
    p.add_argument("--complete", action="store_true",
                   help="require a complete P/D global ranktable (what `up` starts with)")
    p.add_argument("--cards", type=int, metavar="N", help="cards per host (device ids 0..N-1; default: unknown, ids up to 1023)")
    p.add_argument("--against-hosts", metavar="SPEC", help="compare device IPs with the live hosts of SPEC (default: no hosts asked)")
    _host_key_flag(p)

    img = sub.add_parser("image", help="the inference image", description="Build the inference image.")
    img_sub = img.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    p = _verb(img_sub, "build", "deployctl.commands.image:build",
              "build the image from the base image plus the AscendCloud packages, on every host that needs it",
              "deployctl image build playbooks/mixed-1host-910b.yaml --dry-run")
    _spec_arg(p)
    p.add_argument("--dry-run", action="store_true", help="say per host build / ship / skip and why")
    _host_key_flag(p)

    wt = sub.add_parser("weights", help="model weights", description="Model weights on every host.")
    wt_sub = wt.add_subparsers(dest="weights_command", metavar="ACTION", required=True)
    p = _verb(wt_sub, "sync", "deployctl.commands.weights:sync",
              "copy the model weights from OBS/S3 (or a directory) to every host, verified",
              "deployctl weights sync playbooks/mixed-1host-910b.yaml")
    _spec_arg(p)
    p.add_argument("--dry-run", action="store_true", help="say what would be transferred")
    _host_key_flag(p)

    bench = sub.add_parser("bench", help="benchmark the endpoint (static or dynamic load)",
                           description="Benchmark an OpenAI-compatible endpoint: TTFT, TPOT, ITL, E2E, throughput.")
    bench_sub = bench.add_subparsers(dest="bench_mode", metavar="MODE", required=True)
    for mode, example in (
        ("static", "deployctl bench static http://127.0.0.1:9000 --parallel-num 1 4 8 "
                   "--prompt-tokens 1024 2048 --output-tokens 128 256"),
        ("dynamic", "deployctl bench dynamic playbooks/demo-pd.yaml --request-rate 1 2 4 --num-prompts 100 100 100"),
    ):
        p = _verb(bench_sub, mode, "deployctl.commands.bench:run",
                  f"{mode} load against a spec's endpoint or a base URL", example)
        p.add_argument("target", metavar="SPEC|URL", help="a spec (its public endpoint) or http://host:port")
        p.add_argument("--served-model-name", metavar="NAME",
                       help="model name sent in each request (default: the spec's model.served_name, else the "
                            "first model the server lists at /v1/models)")
        p.add_argument("--tokenizer", metavar="DIR",
                       help="count tokens with this tokenizer (default: the server's usage counts)")
        p.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                       help="OpenAI API to call: /v1/completions or /v1/chat/completions (default: %(default)s)")
        p.add_argument("--warmup", type=int, default=0, metavar="N",
                       help="requests sent and not measured before the runs (default %(default)s)")
        p.add_argument("--result-dir", metavar="DIR",
                       help=f"write bench_{mode}.json, .csv and .png here (default: print only)")
        p.add_argument("--baseline", metavar="FILE",
                       help="an earlier bench JSON document to compare with (default: no comparison)")
        p.add_argument("--max-regression", type=float, default=10.0, metavar="PCT",
                       help="with --baseline: exit 1 when a metric is this many percent worse (default %(default)g)")
        if mode == "static":
            p.add_argument("--prompt-tokens", type=int, nargs="+", metavar="N",
                           help="prompt lengths in tokens, paired with --output-tokens "
                                "(default: 1024 2048, as the vendor's)")
            p.add_argument("--output-tokens", type=int, nargs="+", metavar="N",
                           help="output lengths in tokens, paired with --prompt-tokens "
                                "(default: 128 256, as the vendor's)")
            p.add_argument("--parallel-num", type=int, nargs="+", default=[1, 4, 8, 16, 32], metavar="N",
                           help="concurrent requests, one run per value (default: 1 4 8 16 32)")
            p.add_argument("--epochs", type=int, default=5, metavar="N",
                           help="waves per run (default %(default)s, as the vendor's)")
        else:
            p.add_argument("--prompt-tokens", type=int, nargs="+", metavar="N",
                           help="synthetic prompt length in tokens (one value; default: none, then --dataset "
                                "is needed)")
            p.add_argument("--output-tokens", type=int, nargs="+", metavar="N",
                           help="output length in tokens (one value; with --dataset it overrides the dataset's; "
                                "default: none)")
            p.add_argument("--request-rate", type=float, nargs="+", required=True, metavar="RATE",
                           help="requests per second, one run per value (required)")
            p.add_argument("--num-prompts", type=int, nargs="+", required=True, metavar="N",
                           help="requests per run, one value per --request-rate (required)")
            p.add_argument("--dataset", metavar="FILE",
                           help="prompts from this file (default: synthetic prompts of --prompt-tokens)")
            p.add_argument("--dataset-type", choices=("sharegpt", "alpaca", "custom"), default="sharegpt",
                           help="format of --dataset (default: %(default)s)")
            p.add_argument("--seed", type=int, default=0,
                           help="seed of the random arrival times and prompt choice (default %(default)s)")
        p.add_argument("--max-seconds", type=float, metavar="S",
                       help="stop sending after this long (default: no limit)")

    _verb(sub, "schema", "deployctl.commands.schema:run",
          "print the spec's JSON Schema (for editors: yaml-language-server)",
          "deployctl schema > deployctl.schema.json")
    return parser


def _dispatch(args: argparse.Namespace, ui) -> int:
    module_name, _, function = args.handler.partition(":")
    module = importlib.import_module(module_name)
    return int(getattr(module, function)(args, ui) or 0)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `deployctl` console script."""
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # only when the shell asks for completions
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)

    from deployctl.errors import DeployctlError, ExitStatus
    from deployctl.ui import UI, error_document, render_error

    ui = UI(output=args.output, verbose=args.verbose, quiet=args.quiet, color=not args.no_color)
    try:
        return _dispatch(args, ui)
    except DeployctlError as error:
        if os.environ.get("DEPLOYCTL_DEBUG"):
            raise
        render_error(ui, error)
        if ui.json and not ui.emitted:
            ui.emit_json(error_document(error))
        return int(error.exit_status)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return int(ExitStatus.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitStatus.OK)
    except Exception:
        import traceback

        traceback.print_exc()
        sys.stderr.write("this is a bug in deployctl: please report it with the traceback above\n")
        return int(ExitStatus.FAILED)


if __name__ == "__main__":
    raise SystemExit(main())
