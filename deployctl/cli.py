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
import time

from deployctl import __version__
from deployctl.cli_numbers import number

_FORMATTER = argparse.RawDescriptionHelpFormatter


def _common(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The common flags; accepted before or after the verb."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    group = parser.add_argument_group("output")
    group.add_argument("--output", "-o", choices=("table", "json"), default=default("table"),
                       help="table for people, json for scripts (one document on stdout; default: table)")
    group.add_argument("--verbose", "-v", action="store_true", default=default(False),
                       help="say more: up, down, image build and weights sync print each step's commands, files and "
                            "transfers as it starts (secrets by their label only)")
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


def _answer_tokens_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--answer-tokens", type=number("--answer-tokens"), default=8, metavar="N",
                        help="tokens of the temperature-0 answer every serving path (each mixed instance, each "
                             "prefill x decode pair, the front) must agree on after a change (default %(default)s; "
                             "0 leaves the check out)")


def _rollout_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drain-timeout", type=number("--drain-timeout"), default=None, metavar="SECONDS",
                        help="how long a drain rollout waits for a server taken out of the front to finish its "
                             "requests (vLLM /metrics: none running or waiting) before it stops it gracefully; what "
                             "remained is said (default 120)")
    _shutdown_flag(parser, "a replaced server")


def _shutdown_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--shutdown-timeout", type=number("--shutdown-timeout"), default=None, metavar="SECONDS",
                        help=f"`docker stop --time`: how long {what} may take to finish after SIGTERM (default 30; "
                             "a server's own longer --shutdown-timeout in its extra args wins)")


def _spec_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("spec", metavar="SPEC", nargs=None if required else "?", help="deployment spec (YAML)")


def _host_key_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accept-new-host-keys", action="store_true",
                        help="trust and record keys of hosts not yet in known_hosts (never a changed key)")
    parser.add_argument("--connect-timeout", type=number("--connect-timeout"), default=10.0, metavar="SECONDS",
                        help="give up on a host that has not connected, shown its SSH banner and accepted the "
                             "key within this long (default %(default)g)")


def _stage_verb(sub, name: str, handler: str, summary: str, example: str, dry_run_help: str) -> None:
    """A command that runs one stage of `up` for a spec (image build, weights sync), with --dry-run."""
    p = _verb(sub, name, handler, summary, example)
    _spec_arg(p)
    p.add_argument("--dry-run", action="store_true", help=dry_run_help)
    _host_key_flag(p)


def build_parser() -> argparse.ArgumentParser:
    from deployctl.cli_bench import add_bench_parser

    """The whole command tree (cheap: no imports beyond argparse)."""
    parser = argparse.ArgumentParser(
        prog="deployctl",
        description="Deploy vLLM inference services onto Ascend NPU and Docker hosts from one YAML spec.",
        epilog=textwrap.dedent("""\
            examples:
              deployctl validate playbooks/mixed-1host-910b.yaml
              deployctl doctor playbooks/mixed-1host-910b.yaml
              deployctl up playbooks/mixed-1host-910b.yaml --dry-run
            exit codes: 0 ok, 1 an operation failed on a host, 2 bad usage or invalid spec, 3 a check failed,
              4 `up` deployed but a drain's deadline left requests in flight"""),
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"deployctl {__version__}")
    _common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _verb(sub, "validate", "deployctl.commands.validate:run",
              "load a spec, check every rule, print the derived layout (no network)",
              "deployctl validate playbooks/demo-pd.yaml --output json\n"
              "generate-spec | deployctl validate -")
    p.add_argument("spec", metavar="SPEC", help="deployment spec (YAML); - reads it from stdin (problems at "
                                                "<stdin>:line:col, relative paths from the current directory)")

    p = _verb(sub, "plan", "deployctl.commands.plan:run",
              "connect to every host over SSH, gather its facts and print every step `up` would take "
              "(changes nothing; `validate` is the offline check)",
              "deployctl plan playbooks/demo-pd.yaml\ndeployctl plan spec.yaml --skip weights")
    _spec_arg(p)
    _host_key_flag(p)
    p.add_argument("--skip", default="", metavar="STAGE,...",
                   help="plan as `up --skip` would run: stages to leave out: checks, image, weights, contract, "
                        "answers, hooks (comma separated; default: none)")
    _answer_tokens_flag(p)
    _rollout_flags(p)

    p = _verb(sub, "up", "deployctl.commands.up:run",
              "bring the deployment up: checks, image, weights, ranktables, containers, health, smoke test",
              "deployctl up playbooks/demo-pd.yaml --yes\ndeployctl up spec.yaml --dry-run --skip image,weights")
    _spec_arg(p)
    p.add_argument("--dry-run", action="store_true",
                   help="connect over SSH, gather the hosts' facts and print the plan; change nothing "
                        "(`validate` is the offline check)")
    p.add_argument("--yes", "-y", action="store_true", help="replace or remove running containers without asking")
    p.add_argument("--skip", default="", metavar="STAGE,...",
                   help="stages to skip: checks, image, weights, contract (the check from inside each new "
                        "container), answers (the all-pairs answer check), hooks (the spec's hooks) (comma "
                        "separated; default: none)")
    _answer_tokens_flag(p)
    _rollout_flags(p)
    p.add_argument("--lock-wait", type=number("--lock-wait"), default=0.0, metavar="SECONDS",
                   help="wait this long for another deploy's lock (default %(default)g: refuse at once)")
    p.add_argument("--health-timeout", type=number("--health-timeout"), default=None, metavar="SECONDS",
                   help="how long an instance may take to become healthy (default: the spec's "
                        "health.startup_timeout, else 1200, or 600 + 2 per GB of weights when a model name "
                        "states its parameter count, whichever is more)")
    p.add_argument("--bench", action="store_true", help="run a short static bench after a successful deploy")
    _host_key_flag(p)

    p = _verb(sub, "down", "deployctl.commands.down:run",
              "stop and remove this deployment's containers (found by label) and the files deployctl wrote for "
              "it on its hosts (env files of secrets, ranktables); the history stays",
              "deployctl down playbooks/demo-pd.yaml --yes")
    _spec_arg(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    p.add_argument("--dry-run", action="store_true", help="print what down would remove, each command as argv")
    p.add_argument("--skip", default="", metavar="hooks",
                   help="hooks: leave out the spec's pre_down, post_down and on_failure hooks (default: none)")
    _shutdown_flag(p, "a running server")
    _host_key_flag(p)

    p = _verb(sub, "status", "deployctl.commands.status:run",
              "per instance: host, role, devices, port, container state, health, image",
              "deployctl status playbooks/demo-pd.yaml --output json")
    _spec_arg(p)
    p.add_argument("--hang-timeout", type=number("--hang-timeout"), default=15.0, metavar="SECONDS",
                   help="an instance whose /health answers but whose one-token generate takes longer is `hung` "
                        "(default %(default)g)")
    p.add_argument("--timeline", action="store_true",
                   help="draw where the last `up`'s time to serve went, per host and phase (from the history)")
    _host_key_flag(p)

    p = _verb(sub, "watch", "deployctl.commands.watch:run",
              "watch every server's progress and restart what stalls (a vllm-ascend DP group as a whole), with "
              "the reason in the history",
              "deployctl watch playbooks/vllm-ascend-pd-qwen3.yaml --interval 30\n"
              "deployctl watch playbooks/demo-pd.yaml --once --output json   # from cron")
    _spec_arg(p)
    p.add_argument("--interval", type=number("--interval"), default=30.0, metavar="SECONDS",
                   help="seconds between two probes (default %(default)g); a stall is seen within two")
    p.add_argument("--once", action="store_true",
                   help="probe once and exit (for cron; the probe before is kept in .deployctl/<name>/watch.json "
                        "beside the spec)")
    p.add_argument("--dry-run", action="store_true", help="say what it would restart, restart nothing")
    p.add_argument("--hang-timeout", type=number("--hang-timeout"), default=15.0, metavar="SECONDS",
                   help="bound of the one-token generate sent to each server (default %(default)g)")
    p.add_argument("--health-timeout", type=number("--health-timeout"), default=None, metavar="SECONDS",
                   help="how long a restarted server may take to answer its health check (default: the spec's "
                        "health.startup_timeout, else 1200 s or more for a large model)")
    _shutdown_flag(p, "a restarted server")
    p.add_argument("--lock-wait", type=number("--lock-wait"), default=0.0, metavar="SECONDS",
                   help="wait this long for the deploy lock before a restart (default %(default)g: an `up` in "
                        "progress defers the restart to the next probe)")
    _host_key_flag(p)

    p = _verb(sub, "monitor", "deployctl.commands.monitor:run",
              "write the monitoring pack: Prometheus file_sd targets for every API server, the front, each host's "
              "NPU exporter and node_exporter, prometheus.yml, alert rules, a provisioned Grafana dashboard",
              "deployctl monitor playbooks/demo-pd.yaml\n"
              "deployctl monitor spec.yaml --out /etc/prometheus/deployctl --scan-logs /var/lib/node_exporter")
    _spec_arg(p)
    p.add_argument("--out", metavar="DIR",
                   help="where to write it (default: monitor.out, else .deployctl/<deployment>/monitoring beside "
                        "the spec)")
    p.add_argument("--offline", action="store_true",
                   help="ask no host which exporters listen (every host's exporters become targets)")
    p.add_argument("--scan-logs", metavar="DIR",
                   help="also count known-error lines (HCCL ...) in each container's log into "
                        "DIR/deployctl-<deployment>.prom for node_exporter's textfile collector")
    p.add_argument("--lines", type=number("--lines"), default=2000, metavar="N",
                   help="log lines per container --scan-logs reads (default %(default)s)")
    _host_key_flag(p)

    p = _verb(sub, "logs", "deployctl.commands.logs:run",
              "container logs, each line prefixed by its instance",
              "deployctl logs playbooks/demo-pd.yaml demo-pd-prefill-0 -f")
    _spec_arg(p)
    p.add_argument("instance", nargs="?", metavar="INSTANCE", help="container name (default: every instance)")
    p.add_argument("-f", "--follow", action="store_true", help="keep following")
    p.add_argument("--tail", type=number("--tail"), default=100, metavar="N",
                   help="lines per instance (default %(default)s)")
    _host_key_flag(p)

    p = _verb(sub, "diagnose", "deployctl.commands.diagnose:run",
              "collect from every host what an issue needs (containers' inspect and logs, npu-smi, hccn_tool, "
              "dmesg, plogs, disk, memory, docker, ranktables, history) into one redacted tar.gz, with hints",
              "deployctl diagnose playbooks/demo-pd.yaml\ndeployctl diagnose spec.yaml --lines 1000 --out /tmp/bundle.tar.gz")
    _spec_arg(p)
    p.add_argument("--lines", type=number("--lines"), default=200, metavar="N",
                   help="log lines per container, dmesg and plog file (default %(default)s)")
    p.add_argument("--out", metavar="PATH",
                   help="where to write the tar.gz (default: .deployctl/<deployment>/diagnose-<UTC time>.tar.gz "
                        "beside the spec)")
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
    p.add_argument("--cards", type=number("--cards"), metavar="N",
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
    p.add_argument("--cards", type=number("--cards"), metavar="N",
                   help="cards per host (device ids 0..N-1; default: unknown, ids up to 1023)")
    p.add_argument("--against-hosts", metavar="SPEC", help="compare device IPs with the live hosts of SPEC (default: no hosts asked)")
    _host_key_flag(p)

    img = sub.add_parser("image", help="the inference image", description="Build the inference image.")
    img_sub = img.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    _stage_verb(img_sub, "build", "deployctl.commands.image:build",
                "build the image from the base image plus the AscendCloud packages, on every host that needs it",
                "deployctl image build playbooks/mixed-1host-910b.yaml --dry-run",
                "say per host build / ship / skip and why")

    wt = sub.add_parser("weights", help="model weights", description="Model weights on every host.")
    wt_sub = wt.add_subparsers(dest="weights_command", metavar="ACTION", required=True)
    _stage_verb(wt_sub, "sync", "deployctl.commands.weights:sync",
                "copy the model weights from OBS/S3 (or a directory) to every host, verified",
                "deployctl weights sync playbooks/mixed-1host-910b.yaml", "say what would be transferred")

    add_bench_parser(sub, _verb)
    from deployctl.cli_tune import add_tune_parser

    add_tune_parser(sub, _verb)

    p = _verb(sub, "export", "deployctl.commands.export:run",
              "render the deployment as Kubernetes manifests: plain objects, LeaderWorkerSet or Kthena "
              "ModelServing, with Ascend device resources (no network)",
              "deployctl export playbooks/vllm-ascend-pd-qwen3.yaml --to lws --weights-pvc qwen3-weights\n"
              "deployctl export playbooks/mixed-1host-910b.yaml --to k8s --weights-hostpath /data/qwen2-7b "
              "--image registry.example/vllm-ascend:6.3.909 --out k8s/")
    _spec_arg(p)
    p.add_argument("--to", required=True, choices=("k8s", "lws", "kthena"),
                   help="k8s: Deployments and Services; lws: a LeaderWorkerSet per group; kthena: one ModelServing")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--weights-pvc", metavar="CLAIM", help="the PersistentVolumeClaim holding weights.dest's files")
    weights.add_argument("--weights-hostpath", metavar="PATH", help="the directory on every node holding them")
    p.add_argument("--secret", metavar="NAME", help="the Secret whose keys are the spec's ${VAR} env names")
    p.add_argument("--image", metavar="NAME", help="the image to run instead of image.name (needed with image.build)")
    p.add_argument("--nic", default="eth0", metavar="NAME",
                   help="the pod's interface for GLOO/TP/HCCL_SOCKET_IFNAME (default %(default)s)")
    p.add_argument("--npu-stack", default="mindcluster", metavar="STACK",
                   help="the cluster's NPU stack: mindcluster (Volcano: schedulerName volcano, the label "
                        "ring-controller.atlas, the nodeSelector accelerator-type from requirements.cards), cce "
                        "(Huawei Cloud CCE's huawei.com/ascend-1980) or plain (the device plugin and the default "
                        "scheduler) (default %(default)s)")
    p.add_argument("--node-type", metavar="TYPE",
                   help="with --npu-stack mindcluster: the NPU nodes' accelerator-type label (module-910b-8, "
                        "module-910b-16, module-a3-16, module-a3-16-super-pod, module-a3-8-super-pod, ...; a SuperPoD "
                        "type adds sp-block and huawei.com/schedule_policy) (default: from requirements.cards, "
                        "module-910b-8 for 8 and module-a3-16 for 16)")
    p.add_argument("--check", action="store_true",
                   help="report every rule of the target and NPU stack (MindCluster's, the drain on update, the "
                        "start-up budget) as met or not, with its source, instead of printing the manifests "
                        "(exit 1 when one is not met)")
    p.add_argument("--npu-resource", metavar="NAME",
                   help="the device plugin's resource name, over the stack's (mindcluster and plain: "
                        "huawei.com/Ascend910; cce: huawei.com/ascend-1980)")
    p.add_argument("--namespace", metavar="NS", help="metadata.namespace of every object (default: none, kubectl's)")
    p.add_argument("--out", metavar="DIR", help="write one file per object there (default: one stream on stdout)")

    _verb(sub, "schema", "deployctl.commands.schema:run",
          "print the spec's JSON Schema (for editors: yaml-language-server)",
          "deployctl schema > deployctl.schema.json")
    return parser


def _dispatch(args: argparse.Namespace, ui) -> int:
    module_name, _, function = args.handler.partition(":")
    module = importlib.import_module(module_name)
    return int(getattr(module, function)(args, ui) or 0)


def process_started() -> float:
    """When this process started, on time.monotonic()'s clock: the interpreter's start-up and imports belong to the
    user's wall time too (Linux: /proc/self/stat's start time against CLOCK_BOOTTIME; elsewhere: now)."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 60 else now


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `deployctl` console script."""
    # `up`'s time-to-serve ledger counts from here: the process's start when this is its entry point
    started = process_started() if argv is None else time.monotonic()
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # only when the shell asks for completions
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    args.started = started

    from deployctl.errors import DeployctlError, ExitStatus
    from deployctl.ui import UI, error_document, render_error

    ui = UI(output=args.output, verbose=args.verbose, quiet=args.quiet, color=not args.no_color)
    from deployctl.redaction import forget

    forget()  # an earlier command's spec (in one process) is not this one's
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
