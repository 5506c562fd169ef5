"""`deployctl watch` on the test bed (issue 31): a vllm-ascend DP group (two ranks, external launch) on tb1 and
another group on tb2. Saturated by many slow concurrent requests, probe after probe restarts nothing; one rank of
the group stalled at run time (the stand-in's POST /standin/stall: its /health stays 200) is seen at the second
probe after it and its whole group restarts, the other group untouched, the reason in the deployment's history."""

from __future__ import annotations

import json
import threading

from tests.e2e.conftest import MODEL, http_json

NAME = "e2e-watch"
TOPOLOGY = """topology:
  mode: mixed
  dp_launch: external
  groups:
    - {hosts: [tb1], dp: 2, tp: 2, port: 8400}
    - {hosts: [tb2], dp: 1, tp: 2, port: 8410}
"""
# an emulated KV cache of 4 sequences per engine and 20 ms a token: 24 requests of 60 tokens queue for seconds
ENV = "env: {STANDIN_CAPACITY: '4', STANDIN_TPOT_MS: '20'}\n"
GROUP = [f"{NAME}-mixed0-r0", f"{NAME}-mixed0-r1"]
OTHER = f"{NAME}-mixed1-r0"


def spec(bed):
    extra = "server: vllm-ascend\nrequirements: {cards: 8}\n" + MODEL + ENV
    return bed.spec_yaml(NAME, TOPOLOGY, hosts_used=["tb1", "tb2"], extra=extra)


def watch_once(deployctl, path) -> tuple[int, list[dict]]:
    code, out, err = deployctl("watch", path, "--once", "--hang-timeout", "2", "--output", "json")
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines, err
    return code, lines


def started_at(bed, host, names) -> dict:
    out = bed.docker_on(host, "inspect", "--format", "{{.Name}} {{.Id}} {{.State.StartedAt}}", *names).stdout
    return {line.split()[0].lstrip("/"): tuple(line.split()[1:]) for line in out.splitlines()}


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


def test_watch_restarts_a_stalled_ranks_whole_group_and_nothing_under_saturation(bed, deployctl):
    path = deployctl.write(spec(bed))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        before = {**started_at(bed, "tb1", GROUP), **started_at(bed, "tb2", [OTHER])}

        # a first probe: every server idle and answering
        code, lines = watch_once(deployctl, path)
        assert code == 0 and {line["instance"]: line["verdict"] for line in lines} == {
            GROUP[0]: "idle", GROUP[1]: "idle", OTHER: "idle"}

        # saturation: 24 slow requests per rank of the group, 4 run at a time; each probe sees a long queue whose
        # tokens advance (its own one-token generate waits behind it and times out): busy, never stalled
        saturating = load(bed, "tb1", (8400, 8401), 24)
        verdicts = []
        for _ in range(3):
            code, lines = watch_once(deployctl, path)
            assert code == 0 and not [line for line in lines if line["type"] == "action"], [
                (line.get("instance"), line.get("verdict"), line.get("reason")) for line in lines]
            verdicts += [(line["instance"], line["verdict"], line["reason"]) for line in lines]
        assert any(verdict == "busy" for _, verdict, _ in verdicts), verdicts
        assert not [v for v in verdicts if v[1] not in ("busy", "idle")], verdicts
        saturating.join(300)
        assert not saturating.is_alive()
        assert {**started_at(bed, "tb1", GROUP), **started_at(bed, "tb2", [OTHER])} == before
        code, lines = watch_once(deployctl, path)  # the queue drained: idle again
        assert code == 0 and {line["verdict"] for line in lines} == {"idle"}, lines

        # one rank hangs (requests queue, no token, /health 200)
        stalled = bed.run_on("tb1", ["curl", "--silent", "-X", "POST", "--data", '{"mode": "hang"}',
                                     "http://127.0.0.1:8401/standin/stall"]).stdout
        assert json.loads(stalled) == {"dead": False, "hung": ["1"]}  # its engine: rank 1
        code, lines = watch_once(deployctl, path)  # idle at the probe before: one more probe confirms it
        assert code == 0 and not [line for line in lines if line["type"] == "action"], lines
        assert {line["instance"]: line["verdict"] for line in lines}[GROUP[1]] == "suspect"
        code, out, _ = deployctl("watch", path, "--once", "--hang-timeout", "2", "--dry-run")  # says, restarts nothing
        assert code == 3 and f"would restart mixed0 ({GROUP[0]}, {GROUP[1]})" in out
        assert "docker stop --time 30 e2e-watch-mixed0-r1" in out and "docker start e2e-watch-mixed0-r0" in out
        assert {**started_at(bed, "tb1", GROUP), **started_at(bed, "tb2", [OTHER])} == before
        code, lines = watch_once(deployctl, path)  # the next probe period
        observed = {line["instance"]: line for line in lines if line["type"] == "observation"}
        assert observed[GROUP[1]]["verdict"] == "stalled", observed[GROUP[1]]
        assert observed[GROUP[1]]["health_code"] == 200  # /health never said so
        assert observed[GROUP[0]]["verdict"] == observed[OTHER]["verdict"] == "idle"
        actions = [line for line in lines if line["type"] == "action"]
        assert [(a["unit"], a["containers"], a["result"]) for a in actions] == [
            ("mixed0", GROUP, "restarting"), ("mixed0", GROUP, "ok")], actions
        assert code == 0

        after = {**started_at(bed, "tb1", GROUP), **started_at(bed, "tb2", [OTHER])}
        assert after[OTHER] == before[OTHER]  # the other group: the same container, never restarted
        for name in GROUP:  # the same containers (ids), started again
            assert after[name][0] == before[name][0] and after[name][1] != before[name][1]
        assert http_json(bed, "tb1", 8401, "/standin/stall") == {"dead": False, "hung": []}
        history = bed.run_on("tb1", ["cat", f"/var/lib/deployctl/{NAME}/history.jsonl"]).stdout.splitlines()
        last = json.loads(history[-1])
        assert (last["action"], last["unit"], last["containers"], last["result"]) == (
            "watch restart", "mixed0", GROUP, "ok")
        # the dry run's probe saw its one-token generate queued: this one finds the engine's counters flat under it
        assert last["reason"].startswith(f"{GROUP[1]}: stalled: engine 1: no token generated in "), last

        # and the next probe finds the group serving again
        code, lines = watch_once(deployctl, path)
        assert code == 0 and not [line for line in lines if line["type"] == "action"], lines

        # the other group's engine core dies (/health 503, then its API server exits): it restarts alone
        died = bed.run_on("tb2", ["curl", "--silent", "-X", "POST", "--data", '{"mode": "engine-dead"}',
                                  "http://127.0.0.1:8410/standin/stall"]).stdout
        assert json.loads(died) == {"dead": True, "hung": []}
        code, lines = watch_once(deployctl, path)
        actions = [line for line in lines if line["type"] == "action"]
        assert code == 0 and [(a["unit"], a["containers"], a["result"]) for a in actions] == [
            ("mixed1", [OTHER], "restarting"), ("mixed1", [OTHER], "ok")], lines
        seen = {line["instance"]: line for line in lines if line["type"] == "observation"}[OTHER]
        assert seen["verdict"] in ("engine-dead", "down"), seen  # 503, or already exited after vLLM's 5 s watchdog
        assert seen["signatures"][0][0] == "engine_core_died"  # and its log says so, in vLLM 0.23's words
        again = {**started_at(bed, "tb1", GROUP), **started_at(bed, "tb2", [OTHER])}
        assert {n: again[n] for n in GROUP} == {n: after[n] for n in GROUP} and again[OTHER] != after[OTHER]
        assert http_json(bed, "tb2", 8410, "/standin/stall") == {"dead": False, "hung": []}
    finally:
        assert deployctl("down", path, "--yes")[0] == 0
