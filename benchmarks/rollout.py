"""Requests lost while `up` replaces a serving deployment, per rollout strategy (issue 31), on the test bed.

Run as root, serialised with other test-bed users: flock /tmp/dctl-bed.lock python benchmarks/rollout.py
Brings up a 2-host test bed. For each strategy (drain, recreate, and drain with surge for one instance), deploys a
mixed deployment of the stand-in behind the real vllm-router (tests/testbed/router_image.py) — and the vllm-ascend
P/D shape (2 prefill + 2 decode groups) behind vllm-ascend's proxy, for drain and recreate — then runs
`deployctl bench dynamic` (Poisson, constant rate, 16-token streams of ~1.6 s) through the router while `up`
applies a changed max_num_seqs. Prints, per strategy: failed requests, TTFT p99 during the rollout, the update's
time and, for drain, the sum of each wave's drain and start times it is compared with (target: update <= (drain +
start) x 1.1; the rest is stop, contract, answers and the front's calls). Then the AscendCloud scheduler flow
(fixed NODE_PORTS: recreate only): the longest time no request through the scheduler succeeded during its update.
Figures only; nothing here is asserted by the tests.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testbed import Testbed, router_image  # noqa: E402
from tests.testbed.demo import place_tiny_model  # noqa: E402

MODEL = ("image: {name: deployctl/standin-vllm:latest}\nweights: {dest: /srv/weights/tiny}\n"
         "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: %d, max_num_batched_tokens: 2048}\n"
         "env: {STANDIN_TPOT_MS: 100, STANDIN_STARTUP_S: 0.5}\n")
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
RATE, PROMPTS = 4.0, 160


def execute_timed(path: Path) -> dict:
    """`up` as the CLI runs it (no checks, no weights), with each step's start and end: the update's seconds,
    each wave's drain and start seconds."""
    from deployctl.execute import Executor
    from deployctl.hosts import connected
    from deployctl.prepare import prepare
    from deployctl.spec.load import load_spec

    spec = load_spec(path)
    events: list = []
    with connected(spec) as transports:
        prepared = prepare(spec, transports, skip=frozenset({"weights", "checks"}))
        executor = Executor(transports, health_timeout=300,
                            on_event=lambda kind, step, _m: events.append((time.monotonic(), kind, step)))
        started = time.monotonic()
        report = executor.execute(prepared.plan)
        seconds = time.monotonic() - started
    if report.failed:
        raise SystemExit(f"up failed: {report.error and report.error.message}")
    spans: dict = {}
    for t, kind, step in events:
        key = (step.stage, step.wave, id(step))
        if kind == "start":
            spans[key] = [t, None]
        elif kind == "done" and key in spans:
            spans[key][1] = t
    waves = {}
    for wave in {w for (_, w, _) in spans if w}:
        drains = [s for (stage, w, _), s in spans.items() if w == wave and stage == "drain" and s[1] is not None]
        starts = [s for (stage, w, _), s in spans.items() if w == wave and stage in ("workers", "surge")
                  and s[1] is not None]
        # a stage's steps run in parallel, stages one after another: the time covered by each kind
        waves[wave] = {"drain_s": _covered(drains), "start_s": _covered(starts)}
    stages: dict = {}  # seconds per stage name over every wave (the time its steps covered)
    for name in {stage for (stage, _, _) in spans}:
        stages[name] = round(_covered([s for (stage, _, _), s in spans.items() if stage == name and s[1] is not None]),
                             2)
    in_waves = [t for (_, wave, _), span in spans.items() if wave for t in span if t is not None]
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


def bench(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deployctl", "bench", "dynamic", url, "--served-model-name", "tiny",
                             "--request-rate", str(RATE), "--num-prompts", str(PROMPTS), "--prompt-tokens", "16",
                             "--output-tokens", "16", "--output", "json", "--seed", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())


def rollout_run(bed: Testbed, name: str, topology: str, url: str, tmp: Path) -> dict:
    first = tmp / f"{name}-1.yaml"
    first.write_text(bed.spec_yaml(name, topology, hosts_used=["tb1"], extra=MODEL % 8))
    run_cli("up", first, "--skip", "weights")
    second = tmp / f"{name}-2.yaml"
    second.write_text(bed.spec_yaml(name, topology, hosts_used=["tb1"], extra=MODEL % 16))
    load = bench(url)
    try:
        timed = execute_timed(second)
    finally:
        out, err = load.communicate(timeout=600)
        run_cli("down", second, "--yes")
    (run,) = json.loads(out)["runs"]
    return {"failed": run["failed"], "requests": run["requests"], "ttft_p99_ms": run["ttft_ms"]["p99"],
            "errors": run["errors"], **timed}


def run_cli(*argv) -> None:
    result = subprocess.run([sys.executable, "-m", "deployctl", *map(str, argv)], capture_output=True, text=True,
                            cwd=tempfile.gettempdir())
    if result.returncode != 0:
        raise SystemExit(f"deployctl {' '.join(map(str, argv))} failed:\n{result.stderr[-2000:]}")


def scheduler_gap(bed: Testbed, tmp: Path) -> dict:
    """The AscendCloud scheduler flow: the longest span with no successful request through the scheduler while
    `up` replaces everything (one prober, a request every 50 ms)."""
    first = tmp / "sched-1.yaml"
    first.write_text(bed.spec_yaml("bench-sched", SCHEDULER, hosts_used=["tb2"], extra=MODEL % 8))
    run_cli("up", first, "--skip", "weights")
    second = tmp / "sched-2.yaml"
    second.write_text(bed.spec_yaml("bench-sched", SCHEDULER, hosts_used=["tb2"], extra=MODEL % 16))
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


def main() -> None:
    only = sys.argv[1:]  # e.g. `drain`: only these scenarios (drain, recreate, surge, pd-drain, pd-recreate,
    # scheduler)
    bed = Testbed(2).up(2)
    try:
        place_tiny_model(bed)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            url = "http://10.200.0.11:8500"
            rows = {strategy: rollout_run(bed, f"bench-{strategy}", MIXED % (router_image.IMAGE, strategy), url, tmp)
                    for strategy in ("drain", "recreate") if not only or strategy in only}
            if not only or "surge" in only:
                rows["surge (1 instance)"] = rollout_run(bed, "bench-surge", ONE % router_image.IMAGE, url, tmp)
            for strategy in ("drain", "recreate"):  # vllm-ascend P/D behind its proxy (/instances/add|remove)
                if not only or f"pd-{strategy}" in only:
                    rows[f"P/D {strategy}"] = rollout_run(bed, f"bench-pd-{strategy}", PD % strategy,
                                                          "http://10.200.0.11:8550", tmp)
            for strategy, row in rows.items():
                parts = sum(w["drain_s"] + w["start_s"] for w in row["waves"].values())
                compare = (f", its waves {row['rollout_s']:.1f} s against drain+start {parts:.1f} s "
                           f"(x{row['rollout_s'] / parts:.2f})" if parts else "")
                print(f"{strategy:>18}: {row['failed']}/{row['requests']} failed, TTFT p99 {row['ttft_p99_ms']:.0f} ms, "
                      f"update {row['update_s']:.1f} s{compare}; seconds per stage {json.dumps(row['stages'])}"
                      + (f"; errors {row['errors']}" if row["errors"] else ""))
            if only and "scheduler" not in only:
                return
            gap = scheduler_gap(bed, tmp)
            print(f"AscendCloud scheduler (recreate): no request succeeded for {gap['gap_s']:.1f} s "
                  f"({gap['failed']}/{gap['probes']} probes failed), update {gap['update_s']:.1f} s; "
                  f"plan says: {gap['gap_said']}")
    finally:
        bed.down()


if __name__ == "__main__":
    main()
