"""Requests lost while `up` replaces a serving deployment, per rollout strategy (issue 31), on the test bed.

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/rollout.py [--help]
Brings up a 2-host test bed. For each strategy (drain, recreate, and drain with surge for one instance), deploys a
mixed deployment of the stand-in behind the real vllm-router (tests/testbed/router_image.py) — and the vllm-ascend
P/D shape (2 prefill + 2 decode groups) behind vllm-ascend's proxy, for drain, surge and recreate — then runs
`deployctl bench dynamic` (Poisson, constant rate, 16-token streams of ~1.6 s) through the front while `up`
applies a changed max_num_seqs. Prints, per strategy: failed requests, TTFT p99 during the rollout, and for drain
the waves' time (the first removal from the front to the last wave's end) against the sum of each wave's drain and
start times (target: waves <= (drain + start) x 1.1), plus the whole execution with `up`'s final all-pairs answer
check and smoke request. Drain and start are the servers' own, seen by a sampler asking each server's /health and
/metrics every 20 ms from the control machine: drain from the moment the front's remove call returned to the first
sample with no request running or waiting, start from `docker run` to the first health 200 (a wave's parts that run
at once count once). The stand-in's model load is 0.5 s by default on the bed, which makes a wave's fixed costs
(the graceful stop, the front's calls, the checks) loom large; a real server loads for tens of seconds to minutes,
so the drain and surge runs also go with a 10 s load (--startup-s). Then the AscendCloud scheduler flow (fixed
NODE_PORTS: recreate only): the longest time no request through the scheduler succeeded during its update.
Figures only; nothing here is asserted by the tests.

Measured (2026-11-26, two runs, waves against drain + start): 0.5 s load: mixed x1.28 and x1.30, surge x1.30 and
x1.26, P/D x1.39 and x1.35; 10 s load: mixed x1.05 and x1.06, surge x1.05 and x1.05, P/D x1.07 and x1.08; 0 failed
requests in every drain and surge run; recreate 10 and 6 failed, P/D recreate 7 and 8; the scheduler flow 2.0 s
without an answer both times. Before this session's cuts (one run, 0.5 s): x1.98 mixed, x1.59 surge, x2.06 P/D,
with each wave's drain and start measured the same way. With `up`'s final checks (the all-pairs answer check, the
32-token smoke request at the stand-in's 100 ms a token) the whole execution is x1.22-1.25 (10 s), x2.2-2.3 (0.5 s).
P/D surge (one run): 0 failed, x1.30 (10 s) and x2.83 (0.5 s): the proxy takes a new instance (a surge group) only
at its listener's next check, every --waiting-retry-interval (10 s by default), ~5 s a wave on average.

Measured, real-drain (2026-11-28, this 2-core machine shared with other work, load average 2-5; two vLLM 0.32 CPU
engines behind the real vllm-router, each wave's start ~60 s): without `server_version` (so no --shutdown-timeout:
vLLM stops with mode=abort and force-kills its engine core, by its own [shutdown] lines) two runs gave waves x1.04
and x1.03 against drain + start (stop ~1 s a wave) but 3/960 and 0/960 failed; the 3 were "EngineCore encountered
an issue", requests the drain had not seen in vLLM's gauges when the core was killed. With `server_version: 0.32.0`
(--shutdown-timeout 30, as the spec now says) 0/960 failed in both runs; the waves were x1.15 and x1.16 (the whole
execution x1.16 and x1.19): the stop is vLLM's graceful teardown with nothing left to run, 7.2-9.9 s a wave (its log:
"request processing complete" at once, then 3.3 s until its worker exited and 3.3 s more until its engine manager
stopped), which the target's drain + start does not count. --timeline prints each old server's request, [shutdown]
and error lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import Testbed, router_image  # noqa: E402
from tests.testbed.demo import place_tiny_model  # noqa: E402

MODEL = ("image: {name: deployctl/standin-vllm:latest}\nweights: {dest: /srv/weights/tiny}\n"
         "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: %d, max_num_batched_tokens: 2048}\n"
         "env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: %g}\n")
MIXED = ("topology:\n  mode: mixed\n  front: {kind: vllm-router, host: tb1, port: 8500, image: \"%s\"}\n"
         "  instances:\n    - {host: tb1, devices: [0], port: 8501}\n    - {host: tb1, devices: [1], port: 8502}\n"
         "rollout: {strategy: %s}\n")
ONE = ("topology:\n  mode: mixed\n  front: {kind: vllm-router, host: tb1, port: 8500, image: \"%s\"}\n"
       "  instances:\n    - {host: tb1, devices: [0], port: 8501}\nrollout: {strategy: drain, max_surge: 1}\n")
SCHEDULER = ("topology:\n  mode: disaggregated\n  scheduler: {host: tb2, port: 8600}\n"
             "  prefill: [{host: tb2, devices: [0], port: 8601}]\n  decode: [{host: tb2, devices: [1], port: 8602}]\n")
PD = ("server: vllm-ascend\ntopology:\n  mode: disaggregated\n  connector: mooncake\n  dp_launch: external\n"
      "  front: {kind: proxy, host: tb1, port: 8550}\n"
      "  prefill:\n    - {hosts: [tb1], dp: 1, tp: 1, port: 9400, devices: [0]}\n"
      "    - {hosts: [tb1], dp: 1, tp: 1, port: 9410, devices: [1]}\n"
      "  decode:\n    - {hosts: [tb1], dp: 1, tp: 1, port: 9500, devices: [2]}\n"
      "    - {hosts: [tb1], dp: 1, tp: 1, port: 9510, devices: [3]}\nrollout: {strategy: %s}\n")
RATE = 4.0
WALL = time.time() - time.monotonic()  # monotonic -> wall clock (docker's log timestamps)


class _Timed:
    """A transport that notes each command it runs: (thread, argv, start, end)."""

    def __init__(self, inner, log: list) -> None:
        self._inner, self._log = inner, log

    def run(self, command, *, timeout=None):
        begin = time.monotonic()
        try:
            return self._inner.run(command, timeout=timeout)
        finally:
            self._log.append((threading.get_ident(), command.argv, begin, time.monotonic()))

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Sampler(threading.Thread):
    """Each server port's /health status and requests held (/metrics: vLLM's running + waiting gauges), asked from
    the control machine every TICK_S over a kept connection: when a drained server really held nothing, when a
    started one really answered its health path (the honest drain and start times, beside deployctl's own polls)."""

    TICK_S = 0.02

    def __init__(self, address: str, ports) -> None:
        super().__init__(daemon=True)
        self.address, self.ports = address, tuple(ports)
        self.samples: dict[int, list] = {p: [] for p in self.ports}  # port -> [(t, health code, held or None)]
        self.done = threading.Event()

    def run(self) -> None:
        import http.client

        from deployctl.bench.telemetry import parse_engine

        connections: dict = {}

        def get(port: int, path: str):
            connection = connections.get(port) or http.client.HTTPConnection(self.address, port, timeout=0.5)
            connections[port] = connection
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                return response.status, response.read().decode(errors="replace")
            except Exception:  # noqa: BLE001 - down, starting, refused: no answer this tick
                connection.close()
                connections.pop(port, None)
                return 0, ""

        while not self.done.wait(self.TICK_S):
            for port in self.ports:
                t = time.monotonic()
                code, _ = get(port, "/health")
                held = None
                if code == 200:
                    status, page = get(port, "/metrics")
                    engine = parse_engine("x", page) if status == 200 else None
                    if engine is not None and (engine.running is not None or engine.waiting is not None):
                        held = (engine.running or 0.0) + (engine.waiting or 0.0)
                self.samples[port].append((t, code, held))

    def first(self, port: int, after: float, test) -> Optional[float]:
        """The first sample time after `after` whose (code, held) passes `test`."""
        return next((t for t, code, held in self.samples.get(port, ()) if t >= after and test(code, held)), None)


def execute_timed(path: Path) -> dict:
    """`up` as the CLI runs it (no checks, no weights), with each step's start and end and each command's: the
    update's seconds, each wave's drain and start seconds as deployctl's steps took them and as the servers
    really took them (Sampler: removed from the front -> nothing held; `docker run` -> health 200)."""
    from deployctl.execute import Executor
    from deployctl.hosts import connected
    from deployctl.prepare import prepare
    from deployctl.spec.load import load_spec

    spec = load_spec(path)
    events: list = []
    commands: list = []
    with connected(spec) as transports:
        prepared = prepare(spec, transports, skip=frozenset({"weights", "checks"}))
        # every server the waves start or drain (one host on this bench)
        ports = {s.health.port for s in prepared.plan.steps if s.stage in ("workers", "surge") and s.health}
        ports |= {int(url.rsplit(":", 1)[1].split("/")[0]) for s in prepared.plan.steps if s.stage == "drain"
                  for _, url in s.actions[0].servers}
        address = next(h.address for h in spec.hosts if h.name == spec.instances[0].host)
        sampler = Sampler(address, sorted(p for p in ports if p))
        executor = Executor({h: _Timed(t, commands) for h, t in transports.items()}, health_timeout=300,
                            on_event=lambda kind, step, _m: events.append((time.monotonic(), kind, step,
                                                                           threading.get_ident())))
        sampler.start()
        started = time.monotonic()
        report = executor.execute(prepared.plan)
        seconds = time.monotonic() - started
        sampler.done.set()
        sampler.join()
    if report.failed:
        raise SystemExit(f"up failed: {report.error and report.error.message}")
    spans: dict = {}
    for t, kind, step, thread in events:
        key = (step.stage, step.wave, id(step))
        if kind == "start":
            spans[key] = [t, None, step, thread]
        elif kind == "done" and key in spans:
            spans[key][1] = t
    done = {key: span for key, span in spans.items() if span[1] is not None}

    def ran(span) -> list:
        """The commands a step ran (its thread, within its span)."""
        return [(argv, b, e) for thread, argv, b, e in commands if thread == span[3] and span[0] <= b <= span[1]]

    waves = {}
    for wave in sorted({w for (_, w, _) in done if w}):
        mine = [s for (stage, w, _), s in done.items() if w == wave]
        drains = [s[:2] for s in mine if s[2].stage == "drain"]
        starts = [s[:2] for s in mine if s[2].stage in ("workers", "surge")]
        real_drains, real_starts = [], []
        for span in mine:
            step = span[2]
            if step.stage == "drain":  # removed: the last front call returned; drained: the sampler saw 0 held
                calls = [e for argv, b, e in ran(span) if argv[0] != "sh"]
                removed = max(calls) if calls else span[0]
                for _, url in step.actions[0].servers:
                    port = int(url.rsplit(":", 1)[1].split("/")[0])
                    zero = sampler.first(port, removed, lambda code, held: held == 0 or code != 200)
                    real_drains.append([removed, zero if zero is not None else span[1]])
            elif step.stage in ("workers", "surge") and step.health is not None:
                runs = [b for argv, b, e in ran(span) if argv[:2] == ("docker", "run")]
                if runs:
                    ready = sampler.first(step.health.port, runs[0], lambda code, held: code == 200)
                    real_starts.append([runs[0], ready if ready is not None else span[1]])
        stage_spans = {}
        for s in mine:
            stage_spans.setdefault(s[2].stage, []).append(s[:2])
        # a stage's steps run in parallel, stages one after another: the time covered by each kind
        waves[wave] = {"wall_start": WALL + min(s[0] for s in mine), "drain_s": _covered(drains),
                       "start_s": _covered(starts),
                       "real_drain_s": _covered(real_drains), "real_start_s": _covered(real_starts),
                       "span_s": max(s[1] for s in mine) - min(s[0] for s in mine),
                       "timeline": [(stage, round(min(b for b, _ in sp) - min(s[0] for s in mine), 3),
                                     round(_covered(sp), 3)) for stage, sp in
                                    sorted(stage_spans.items(), key=lambda kv: min(b for b, _ in kv[1]))],
                       "commands": [(s[2].stage, " ".join(argv)[:60], round(b - min(x[0] for x in mine), 3),
                                     round(e - b, 3)) for s in mine
                                    for argv, b, e in ran(s)]}
    stages: dict = {}  # seconds per stage name over every wave (the time its steps covered)
    for name in {stage for (stage, _, _) in done}:
        stages[name] = round(_covered([s[:2] for (stage, _, _), s in done.items() if stage == name]), 2)
    in_waves = [t for (_, wave, _), span in done.items() if wave for t in span[:2]]
    rollout_s = max(in_waves) - min(in_waves) if in_waves else 0.0  # first drain to the last wave's end
    return {"update_s": seconds, "rollout_s": rollout_s, "waves": waves, "stages": stages,
            "rollout": prepared.plan.rollout}


def _covered(spans: list) -> float:
    """Seconds covered by the union of [begin, end] spans."""
    total, reach = 0.0, None
    for begin, end in sorted(spans):
        if reach is None or begin > reach:
            total, reach = total + end - begin, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def bench(url: str, prompts: int = 160) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deployctl", "bench", "dynamic", url, "--served-model-name", "tiny",
                             "--request-rate", str(RATE), "--num-prompts", str(prompts), "--prompt-tokens", "16",
                             "--output-tokens", "16", "--output", "json", "--seed", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())


def rollout_run(bed: Testbed, name: str, topology: str, url: str, tmp: Path, startup: float) -> dict:
    first = tmp / f"{name}-1.yaml"
    first.write_text(bed.spec_yaml(name, topology, hosts_used=["tb1"], extra=MODEL % (8, startup)))
    run_cli("up", first, "--skip", "weights")
    second = tmp / f"{name}-2.yaml"
    second.write_text(bed.spec_yaml(name, topology, hosts_used=["tb1"], extra=MODEL % (16, startup)))
    # enough requests to outlast the update: about 40 s of them, and 4 starts' worth more
    load = bench(url, int(RATE * (40 + 4 * startup)))
    try:
        timed = execute_timed(second)
        covered = load.poll() is None  # the bench still ran when the update ended: it covered all of it
    finally:
        out, err = load.communicate(timeout=600)
        run_cli("down", second, "--yes")
    (run,) = json.loads(out)["runs"]
    return {"failed": run["failed"], "requests": run["requests"], "ttft_p99_ms": run["ttft_ms"]["p99"],
            "errors": run["errors"], "covered": covered, **timed}


def run_cli(*argv) -> None:
    result = subprocess.run([sys.executable, "-m", "deployctl", *map(str, argv)], capture_output=True, text=True,
                            cwd=tempfile.gettempdir())
    if result.returncode != 0:
        raise SystemExit(f"deployctl {' '.join(map(str, argv))} failed:\n{result.stderr[-2000:]}")


def scheduler_gap(bed: Testbed, tmp: Path) -> dict:
    """The AscendCloud scheduler flow: the longest span with no successful request through the scheduler while
    `up` replaces everything (one prober, a request every 50 ms)."""
    first = tmp / "sched-1.yaml"
    first.write_text(bed.spec_yaml("bench-sched", SCHEDULER, hosts_used=["tb2"], extra=MODEL % (8, 0.5)))
    run_cli("up", first, "--skip", "weights")
    second = tmp / "sched-2.yaml"
    second.write_text(bed.spec_yaml("bench-sched", SCHEDULER, hosts_used=["tb2"], extra=MODEL % (16, 0.5)))
    body = json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": 1, "temperature": 0}).encode()
    done = threading.Event()
    results: list = []

    def probe() -> None:
        while not done.is_set():
            sent = time.monotonic()
            try:
                request = urllib.request.Request("http://10.200.0.12:8600/v1/completions", body,
                                                 {"Content-Type": "application/json"})
                urllib.request.urlopen(request, timeout=5).read()
                results.append((sent, True))
            except Exception:
                results.append((sent, False))
            done.wait(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        timed = execute_timed(second)
    finally:
        done.set()
        prober.join()
        run_cli("down", second, "--yes")
    gap, last_ok = 0.0, None
    for sent, ok in results:
        if ok:
            if last_ok is not None:
                gap = max(gap, sent - last_ok)
            last_ok = sent
    return {"gap_s": gap, "failed": sum(1 for _, ok in results if not ok), "probes": len(results),
            "update_s": timed["update_s"], "gap_said": (timed["rollout"] or {}).get("gap")}


def real_rollout_run(bed: Testbed, tmp: Path) -> dict:
    """The drain rollout of two real vLLM engines (vLLM's CPU build, tests/testbed/real_engine.py) behind the real
    vllm-router on tb1, as a GPU host: weights from the bed's S3 on the first `up`, then a changed max_num_seqs
    applied under load; drain and start are vLLM's own (its /metrics gauges, its /health)."""
    import os

    from tests.real_engine.conftest import real_spec
    from tests.testbed import real_engine

    os.environ.update(bed.s3.env())  # the CLI's subprocesses read the S3 credentials as a user exports them
    first, second = tmp / "real-1.yaml", tmp / "real-2.yaml"
    # server_version names the image's vLLM, as the README asks of a custom image: deployctl then renders
    # --shutdown-timeout (vLLM >= 0.18), so a drained server's stop lets what it still runs finish. Without it
    # vLLM stops with mode=abort and kills its engine core at once (its own [shutdown] lines); a request the drain
    # could not yet see in vLLM's gauges failed "EngineCore encountered an issue" (3 of 960 in one run here).
    version = real_engine.VERSION
    first.write_text(real_spec(bed, "bench-real", (8501, 8502), front_port=8500, strategy="drain",
                               server_version=version))
    second.write_text(real_spec(bed, "bench-real", (8501, 8502), max_num_seqs=6, front_port=8500, strategy="drain",
                                server_version=version))
    with real_engine.prepared_bed(bed):
        run_cli("up", first, "--yes")
        load = bench("http://10.200.0.11:8500", int(RATE * 240))  # two starts of ~45 s, drains, checks: ~2 min
        # the old servers' own words while they are drained and stopped (uvicorn's access lines, vLLM's
        # [shutdown] lines and errors), with docker's timestamps: where a failed request met its server
        follow = {name: _follow(bed, name, tmp / f"{name}.log")
                  for name in ("bench-real-mixed-0", "bench-real-mixed-1")}
        try:
            timed = execute_timed(second)
            covered = load.poll() is None
        finally:
            out, err = load.communicate(timeout=900)
            run_cli("down", second, "--yes")
            for process in follow.values():
                process.terminate()
                process.wait(10)
    (run,) = json.loads(out)["runs"]
    logs = {name: (tmp / f"{name}.log").read_text(errors="replace") for name in follow}
    return {"failed": run["failed"], "requests": run["requests"], "ttft_p99_ms": run["ttft_ms"]["p99"],
            "errors": run["errors"], "covered": covered, "server_logs": logs, **timed}


def _follow(bed: Testbed, name: str, path: Path) -> subprocess.Popen:
    """`docker logs --follow --timestamps` of a container on tb1 into `path` (it ends when the container goes)."""
    from tests.testbed import images

    with open(path, "wb") as out:
        return subprocess.Popen([images.docker_cli(), "-H", f"unix://{bed.host('tb1').docker_socket}", "logs",
                                 "--follow", "--timestamps", name], stdout=out, stderr=subprocess.STDOUT)


def _server_lines(row: dict) -> None:
    """Each old server's lines from its wave's start on: requests it answered, its shutdown, errors (seconds from
    the wave's start, as the timeline's)."""
    from datetime import datetime

    keep = ("POST /v1/", "[shutdown]", "Error", "error", "dead", "Dead")
    for number, wave in row["waves"].items():
        name = f"bench-real-mixed-{number - 1}"
        lines = []
        for line in row["server_logs"].get(name, "").splitlines():
            stamp, _, text = line.partition(" ")
            try:
                at = datetime.fromisoformat(stamp[:26] + "+00:00").timestamp() - wave["wall_start"]
            except ValueError:
                continue
            if at >= -2 and any(k in text for k in keep):
                lines.append(f"{at:+.3f} {text.strip()[:140]}")
        print(f"    wave {number}, {name} (old): " + (" | ".join(lines[:40]) or "no line after the wave's start"))


SCENARIOS = ("drain", "recreate", "surge", "pd-drain", "pd-surge", "pd-recreate", "scheduler", "real-drain")
DEFAULT = SCENARIOS[:-1]  # real-drain needs the real engine's venv (~3.1 GB; tests/testbed/real_engine.py)


def arguments():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help=f"only these, of {', '.join(SCENARIOS)} (default: all but real-drain)")
    parser.add_argument("--startup-s", type=float, action="append", metavar="SECONDS",
                        help="the stand-in's model load (STANDIN_STARTUP_S) for the drain and surge runs; repeat "
                             "for several (default: 0.5, the bed's usual, and 10, closer to a real server's start; "
                             "recreate and the scheduler run with the first)")
    parser.add_argument("--timeline", action="store_true",
                        help="also print each wave's stages (start offset, seconds) and commands (seconds)")
    args = parser.parse_args()
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    args.startup_s = args.startup_s or [0.5, 10.0]
    return args


def report(name: str, row: dict, timeline: bool) -> None:
    """One run's line: failures, TTFT p99, the update's and waves' seconds against drain + start (deployctl's
    steps, and the servers' own: removal to nothing held, `docker run` to health 200)."""
    steps = sum(w["drain_s"] + w["start_s"] for w in row["waves"].values())
    real = sum(w["real_drain_s"] + w["real_start_s"] for w in row["waves"].values())
    compare = (f"; waves {row['rollout_s']:.2f} s against drain+start {real:.2f} s: x{row['rollout_s'] / real:.2f} "
               f"(drain and start as deployctl's steps took them: {steps:.2f} s); the whole execution "
               f"{row['update_s']:.2f} s, x{row['update_s'] / real:.2f}, with up's final answer check and smoke "
               f"request; per wave (seconds, then drain+start) "
               + ", ".join(f"{w['span_s']:.2f}/{w['real_drain_s']:.2f}+{w['real_start_s']:.2f}"
                           for w in row["waves"].values()) if real else f"; up {row['update_s']:.2f} s")
    print(f"{name:>24}: {row['failed']}/{row['requests']} failed, TTFT p99 {row['ttft_p99_ms']:.0f} ms"
          f"{compare}; seconds per stage {json.dumps(row['stages'])}"
          + (f"; errors {row['errors']}" if row["errors"] else "")
          + ("" if row["covered"] else "; THE BENCH ENDED BEFORE THE UPDATE DID"))
    if timeline:
        for number, wave in row["waves"].items():
            print(f"    wave {number}: " + ", ".join(f"{stage} +{at:.2f} {took:.2f}s" for stage, at, took in
                                                   wave["timeline"]))
            print("      " + "; ".join(f"{stage}: {argv} +{at:.2f} {took:.3f}s"
                                         for stage, argv, at, took in wave["commands"]))
        if row.get("server_logs"):
            _server_lines(row)


def main() -> None:
    args = arguments()
    wanted = set(args.scenarios or DEFAULT)
    first = args.startup_s[0]
    bed = Testbed(2).up(2)
    try:
        place_tiny_model(bed)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            url, pd_url = "http://10.200.0.11:8500", "http://10.200.0.11:8550"
            runs = []  # (label, name, topology, url, startup seconds)
            for startup in args.startup_s:
                at = f", start {startup:g} s"
                if "drain" in wanted:
                    runs.append((f"drain{at}", "bench-drain", MIXED % (router_image.IMAGE, "drain"), url, startup))
                if "surge" in wanted:
                    runs.append((f"surge (1 instance){at}", "bench-surge", ONE % router_image.IMAGE, url, startup))
                if "pd-drain" in wanted:  # vllm-ascend P/D behind its proxy (/instances/add|remove)
                    runs.append((f"P/D drain{at}", "bench-pd-drain", PD % "drain", pd_url, startup))
                if "pd-surge" in wanted:  # each wave's two groups first start again as new groups on cards 4-7
                    runs.append((f"P/D surge{at}", "bench-pd-surge", PD % "drain, max_surge: 2", pd_url, startup))
            if "recreate" in wanted:
                runs.append((f"recreate, start {first:g} s", "bench-recreate", MIXED % (router_image.IMAGE, "recreate"),
                             url, first))
            if "pd-recreate" in wanted:
                runs.append((f"P/D recreate, start {first:g} s", "bench-pd-recreate", PD % "recreate", pd_url, first))
            for label, name, topology, where, startup in runs:
                report(label, rollout_run(bed, name, topology, where, tmp, startup), args.timeline)
            if "real-drain" in wanted:
                report("real vLLM engines, drain", real_rollout_run(bed, tmp), args.timeline)
            if "scheduler" in wanted:
                gap = scheduler_gap(bed, tmp)
                print(f"AscendCloud scheduler (recreate): no request succeeded for {gap['gap_s']:.1f} s "
                      f"({gap['failed']}/{gap['probes']} probes failed), update {gap['update_s']:.1f} s; "
                      f"plan says: {gap['gap_said']}")
    finally:
        bed.down()


if __name__ == "__main__":
    main()
