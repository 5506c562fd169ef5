"""`deployctl watch` on the test bed (issues 31, 39).

The vllm-ascend P/D shape: two prefill and two decode DP groups behind vllm-ascend's proxy. Probes of the healthy
deployment restart nothing (a decode rank asked a bare one-token generate is no hang); one decode rank hung at run
time (the stand-in's POST /standin/stall: its /health stays 200) is seen by `watch --interval` and its group alone
restarts; the proxy then lists every server of both roles and the deployment serves through it.

A mixed vllm-ascend DP group (two ranks) on tb1 and another on tb2, for what the P/D shape does not show: saturated by
many slow concurrent requests, probe after probe restarts nothing; an engine core that dies restarts its group alone,
its log line's signature named."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading

import pytest

from tests.e2e.conftest import MODEL, http_json

TESTBED_GROUP = "testbed2"  # the second bed, beside the first (tests/conftest.py)

NAME = "e2e-pdwatch"
PD = """server: vllm-ascend
image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 8, max_num_batched_tokens: 2048}
env: {STANDIN_STARTUP_S: 0.5}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  front: {kind: proxy, host: tb3, port: 8460}
  prefill:
    - {hosts: [tb3], dp: 1, tp: 1, port: 9420, devices: [0]}
    - {hosts: [tb3], dp: 1, tp: 1, port: 9430, devices: [1]}
  decode:
    - {hosts: [tb3], dp: 2, tp: 1, port: 9520, devices: [2, 3]}
    - {hosts: [tb3], dp: 2, tp: 1, port: 9530, devices: [4, 5]}
"""
HUNG_GROUP = [f"{NAME}-decode1-r0", f"{NAME}-decode1-r1"]
HEALTHY = [f"{NAME}-prefill0-r0", f"{NAME}-prefill1-r0", f"{NAME}-decode0-r0", f"{NAME}-decode0-r1",
           f"{NAME}-proxy"]
ROLES = {9420: "prefill", 9430: "prefill", 9520: "decode", 9521: "decode", 9530: "decode", 9531: "decode"}
SERVERS = len(HUNG_GROUP) + len(HEALTHY)  # observations per probe: every container, the proxy's too
LINE_BOUND_S = 180  # the most one line of watch's output may take (a probe, or a restart that waits for health)


def started_at(bed, host: str, names) -> dict:
    """name -> (container id, when it last started)."""
    out = bed.docker_on(host, "inspect", "--format", "{{.Name}} {{.Id}} {{.State.StartedAt}}", *names).stdout
    return {line.split()[0].lstrip("/"): tuple(line.split()[1:]) for line in out.splitlines()}


def proxy_roles(bed, path) -> dict:
    """The proxy's list, asked and read as deployctl's front_list probe does (plan/front.py): port -> role."""
    from deployctl.plan.front import front_of, list_command, parse_roles
    from deployctl.spec.load import load_spec

    front = front_of(load_spec(path, unresolved_env="allow"))
    answer = bed.run_on("tb3", list(list_command(front).argv)).stdout
    return {int(key.rsplit(":", 1)[1]): role for key, role in parse_roles(front.kind, answer).items()}


def watch_once(deployctl, path, *flags: str) -> list[dict]:
    """One `watch --once` probe's JSON lines; a failed watch fails here with its output, not in the JSON parser."""
    code, out, err = deployctl("watch", path, "--once", "--hang-timeout", "2", "--output", "json", *flags)
    assert code == 0, (code, out, err)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, (code, out, err)
    return lines


class Watching:
    """`deployctl watch SPEC --interval 2` as its own process; its JSON lines read on a thread, each awaited with a
    bound (a watch that stops printing fails the test rather than blocking it)."""

    def __init__(self, path) -> None:
        self.errors = path.with_name("watch.err")  # a file: a pipe nobody reads would block its progress lines
        with self.errors.open("w") as errors:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "deployctl", "watch", str(path), "--interval", "2", "--hang-timeout", "2",
                 "--output", "json"], stdout=subprocess.PIPE, stderr=errors, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.strip():
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self) -> dict:
        try:
            line = self.lines.get(timeout=LINE_BOUND_S)
        except queue.Empty:
            pytest.fail(f"watch printed nothing for {LINE_BOUND_S} s: {self.errors.read_text()}")
        if line is None:
            pytest.fail(f"watch ended (exit {self.process.wait()}): {self.errors.read_text()}")
        return line

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def completion(bed, port: int) -> dict:
    body = json.dumps({"model": "tiny", "prompt": "after the restart", "max_tokens": 4})
    out = bed.run_on("tb3", ["curl", "--silent", "--show-error", "--fail", "--max-time", "60", "-H",
                             "Content-Type: application/json", "--data", body,
                             f"http://127.0.0.1:{port}/v1/completions"]).stdout
    return json.loads(out)


@pytest.mark.testbed
def test_watch_restarts_only_the_hung_decode_group_of_the_pd_shape_and_the_proxy_keeps_every_role(bed, deployctl):
    path = deployctl.write(bed.spec_yaml(NAME, PD, hosts_used=["tb3"]))
    watching = None
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        before = started_at(bed, "tb3", HUNG_GROUP + HEALTHY)
        assert proxy_roles(bed, path) == ROLES

        # the healthy deployment, probed twice (the second compares with the first): nothing restarts. A decode
        # rank's answer to watch's bare one-token generate is no hang (it was read as one: a 400, then 'stalled')
        for _ in range(2):
            lines = watch_once(deployctl, path)
            assert not [line for line in lines if line["type"] != "observation"], lines
            verdicts = {line["instance"]: line["verdict"] for line in lines}
            assert set(verdicts) == set(before) and set(verdicts.values()) <= {"idle", "healthy"}, verdicts
        assert started_at(bed, "tb3", HUNG_GROUP + HEALTHY) == before

        # one decode rank hangs: its requests queue, no token comes, /health stays 200
        stalled = bed.run_on("tb3", ["curl", "--silent", "-X", "POST", "--data", '{"mode": "hang"}',
                                     "http://127.0.0.1:9531/standin/stall"]).stdout
        assert json.loads(stalled)["dead"] is False and len(json.loads(stalled)["hung"]) == 1

        lines = watch_once(deployctl, path)  # idle at the probe before: one more probe confirms it
        assert not [line for line in lines if line["type"] != "observation"], lines
        assert {line["instance"]: line["verdict"] for line in lines}[HUNG_GROUP[1]] == "suspect", lines
        code, out, _ = deployctl("watch", path, "--once", "--hang-timeout", "2", "--dry-run")  # says, restarts nothing
        assert code == 3 and f"would restart decode1 ({HUNG_GROUP[0]}, {HUNG_GROUP[1]})" in out, out
        assert f"docker stop --time 30 {HUNG_GROUP[1]}" in out and f"docker start {HUNG_GROUP[0]}" in out, out
        assert out.count("would restart") == 1, out
        assert started_at(bed, "tb3", HUNG_GROUP + HEALTHY) == before

        watching = Watching(path)
        seen, actions = [], []
        while not actions or actions[-1]["result"] == "restarting":
            line = watching.next()
            (actions if line["type"] == "action" else seen).append(line)
        assert [(a["unit"], a["containers"], a["result"]) for a in actions] == [
            ("decode1", HUNG_GROUP, "restarting"), ("decode1", HUNG_GROUP, "ok")], actions
        assert "e2e-pdwatch-decode1-r1: stalled: " in actions[0]["reason"], actions[0]
        restarting = [line for line in seen if line["verdict"] in ("stalled", "engine-dead", "down", "unresponsive")]
        assert {line["instance"] for line in restarting} == {HUNG_GROUP[1]}, restarting
        # the next whole probe finds every server serving: no more restarts
        after_restart = [watching.next() for _ in range(SERVERS)]
        assert [line["type"] for line in after_restart] == ["observation"] * SERVERS, after_restart
        watching.stop()

        after = started_at(bed, "tb3", HUNG_GROUP + HEALTHY)
        assert {name: after[name] for name in HEALTHY} == {name: before[name] for name in HEALTHY}
        for name in HUNG_GROUP:  # the same containers (ids), started again
            assert after[name][0] == before[name][0] and after[name][1] != before[name][1]
        assert http_json(bed, "tb3", 9531, "/standin/stall") == {"dead": False, "hung": []}

        # the proxy lists every server of both roles, and serves through them
        assert proxy_roles(bed, path) == ROLES
        for _ in range(4):  # the proxy spreads requests over its decode servers
            assert completion(bed, 8460)["choices"][0]["text"]

        history = bed.run_on("tb3", ["cat", f"/var/lib/deployctl/{NAME}/history.jsonl"]).stdout.splitlines()
        last = json.loads(history[-1])
        assert (last["action"], last["unit"], last["containers"], last["result"]) == (
            "watch restart", "decode1", HUNG_GROUP, "ok")
    finally:
        if watching is not None and watching.process.poll() is None:
            watching.stop()
        assert deployctl("down", path, "--yes")[0] == 0


MIXED = "e2e-watch"
TOPOLOGY = """topology:
  mode: mixed
  dp_launch: external
  groups:
    - {hosts: [tb1], dp: 2, tp: 2, port: 8400}
    - {hosts: [tb2], dp: 1, tp: 2, port: 8410}
"""
# an emulated KV cache of 4 sequences per engine and 20 ms a token: 24 requests of 60 tokens queue for seconds
ENV = "env: {STANDIN_CAPACITY: '4', STANDIN_TPOT_MS: '20'}\n"
GROUP = [f"{MIXED}-mixed0-r0", f"{MIXED}-mixed0-r1"]
OTHER = f"{MIXED}-mixed1-r0"


def mixed_spec(bed):
    extra = "server: vllm-ascend\nrequirements: {cards: 8}\n" + MODEL + ENV
    return bed.spec_yaml(MIXED, TOPOLOGY, hosts_used=["tb1", "tb2"], extra=extra)


def every_start(bed) -> dict:
    return {**started_at(bed, "tb1", GROUP), **started_at(bed, "tb2", [OTHER])}


def load(bed, host: str, ports, count: int) -> threading.Thread:
    """`count` slow completions at once against each port, from inside the host (curl), on a thread."""
    body = json.dumps({"model": "tiny", "prompt": "saturate the engine", "max_tokens": 60})
    script = ('for p in "$@"; do i=0; while [ $i -lt ' + str(count) + ' ]; do curl --silent --output /dev/null '
              '--max-time 120 -H "Content-Type: application/json" --data "$0" "http://127.0.0.1:$p/v1/completions" & '
              'i=$((i+1)); done; done; wait')
    thread = threading.Thread(target=bed.run_on, args=(host, ["sh", "-c", script, body, *map(str, ports)]),
                              kwargs={"timeout": 300}, daemon=True)
    thread.start()
    return thread


@pytest.mark.testbed
def test_watch_restarts_nothing_under_saturation_and_a_dead_engines_group_alone(bed, deployctl):
    path = deployctl.write(mixed_spec(bed))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        before = every_start(bed)

        # a first probe: every server idle and answering
        lines = watch_once(deployctl, path)
        assert {line["instance"]: line["verdict"] for line in lines} == {
            GROUP[0]: "idle", GROUP[1]: "idle", OTHER: "idle"}

        # saturation: 24 slow requests per rank of the group, 4 run at a time; each probe sees a long queue whose
        # tokens advance (its own one-token generate waits behind it and times out): busy, never stalled
        saturating = load(bed, "tb1", (8400, 8401), 24)
        verdicts = []
        for _ in range(3):
            lines = watch_once(deployctl, path)
            assert not [line for line in lines if line["type"] == "action"], [
                (line.get("instance"), line.get("verdict"), line.get("reason")) for line in lines]
            verdicts += [(line["instance"], line["verdict"], line["reason"]) for line in lines]
        assert any(verdict == "busy" for _, verdict, _ in verdicts), verdicts
        assert not [v for v in verdicts if v[1] not in ("busy", "idle")], verdicts
        saturating.join(300)
        assert not saturating.is_alive()
        assert every_start(bed) == before
        lines = watch_once(deployctl, path)  # the queue drained: idle again
        assert {line["verdict"] for line in lines} == {"idle"}, lines

        # the other group's engine core dies (/health 503, then its API server exits): it restarts alone
        died = bed.run_on("tb2", ["curl", "--silent", "-X", "POST", "--data", '{"mode": "engine-dead"}',
                                  "http://127.0.0.1:8410/standin/stall"]).stdout
        assert json.loads(died) == {"dead": True, "hung": []}
        lines = watch_once(deployctl, path)
        actions = [line for line in lines if line["type"] == "action"]
        assert [(a["unit"], a["containers"], a["result"]) for a in actions] == [
            ("mixed1", [OTHER], "restarting"), ("mixed1", [OTHER], "ok")], lines
        seen = {line["instance"]: line for line in lines if line["type"] == "observation"}[OTHER]
        assert seen["verdict"] in ("engine-dead", "down"), seen  # 503, or already exited after vLLM's 5 s watchdog
        assert seen["signatures"][0][0] == "engine_core_died"  # and its log says so, in vLLM 0.23's words
        after = every_start(bed)
        assert {n: after[n] for n in GROUP} == {n: before[n] for n in GROUP}
        assert after[OTHER][0] == before[OTHER][0] and after[OTHER][1] != before[OTHER][1]
        assert http_json(bed, "tb2", 8410, "/standin/stall") == {"dead": False, "hung": []}
        history = bed.run_on("tb1", ["cat", f"/var/lib/deployctl/{MIXED}/history.jsonl"]).stdout.splitlines()
        last = json.loads(history[-1])
        assert (last["action"], last["unit"], last["containers"], last["result"]) == (
            "watch restart", "mixed1", [OTHER], "ok")
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
