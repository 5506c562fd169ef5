"""Hooks on the test bed (issue 45): every point runs where and when the spec says, with the deployment's facts;
a failed pre_* refuses the action before any change, a failed post_* marks the result, on_failure follows a
rollback, a timeout stops the hook; a host-side hook runs over SSH; the hook's secret is in no process's argv and
no log, history or output."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import time
from pathlib import Path

from tests.children import deployctl_child
from tests.e2e.conftest import MODEL, container_ids
from tests.testbed import router_image

VAR = "E2E_HOOK_SECRET"
SECRET = "hook-secret-7f3a9c21e5"
MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb3, devices: [4, 5], port: 8780}\n"


def record(log: Path, point: str) -> dict:
    """A hook that appends its facts to `log` on the control machine, as one JSON line (python3: no quoting trap)."""
    program = ("import json, os, sys; keys = [k for k in os.environ if k.startswith('DEPLOYCTL_')]; "
               "open(sys.argv[1], 'a').write(json.dumps({k: os.environ[k] for k in keys}) + '\\n')")
    return {"command": ["python3", "-c", program, str(log)]}


def hooks_yaml(hooks: dict) -> str:
    return "hooks: " + json.dumps(hooks) + "\n"


def lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def history(bed, name: str, host: str = "tb3") -> list[dict]:
    """The deployment's history on its first host."""
    out = bed.run_on(host, ["cat", f"/var/lib/deployctl/{name}/history.jsonl"]).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_every_up_and_down_hook_runs_in_order_with_the_facts_and_a_host_hook_runs_on_the_host(bed, deployctl):
    log = deployctl.tmp_path / "hooks.jsonl"
    on_host = "/tmp/e2e-hooks-post-up"
    hooks = {point: record(log, point) for point in ("pre_up", "pre_down", "post_down", "on_failure")}
    hooks["post_up"] = {"command": ["sh", "-c", f'echo "$DEPLOYCTL_HOST $DEPLOYCTL_RESULT $DEPLOYCTL_ENDPOINT" > {on_host}'],
                        "on": "hosts"}
    path = deployctl.write(bed.spec_yaml("e2e-hooks", MIXED, hosts_used=["tb3"], extra=MODEL + hooks_yaml(hooks)))
    bed.run_on("tb3", ["rm", "-f", on_host], check=False)
    try:
        code, plan = deployctl.json("plan", path, "--skip", "weights")
        assert code == 0, plan
        shown = [(e["hook"], e["host"]) for e in plan["steps"] if e.get("type") == "hook"]
        assert shown == [("pre_up", "(control)"), ("post_up", "tb3")]  # in order; post_up on the host
        assert plan["steps"][0]["argv"][:2] == ["python3", "-c"] and plan["on_failure"][0]["hook"] == "on_failure"
        assert not lines(log)  # plan runs nothing

        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        (pre,) = lines(log)
        assert pre["DEPLOYCTL_HOOK"] == "pre_up" and pre["DEPLOYCTL_DEPLOYMENT"] == "e2e-hooks"
        assert pre["DEPLOYCTL_SPEC"] == str(path.resolve()) and pre["DEPLOYCTL_HOSTS"] == "tb3"
        assert pre["DEPLOYCTL_ENDPOINTS"] == "e2e-hooks-mixed-0=http://10.200.0.13:8780"
        assert bed.run_on("tb3", ["cat", on_host]).stdout.split() == ["tb3", "ok", "http://10.200.0.13:8780"]
        assert doc["time_to_serve"]["phases"]["hooks"] > 0
        last = history(bed, "e2e-hooks")[-1]
        assert [(h["hook"], h["host"], h["result"]) for h in last["hooks"]] == [
            ("pre_up", "(control)", "ok"), ("post_up", "tb3", "ok")]
        assert all(h["seconds"] >= 0 and h["started"] for h in last["hooks"])

        code, doc = deployctl.json("up", path, "--skip", "weights")  # a no-op up runs no hook
        assert code == 0 and doc["changed"] is False and len(lines(log)) == 1

        code, doc = deployctl.json("down", path, "--yes")
        assert code == 0, doc
        assert [line["DEPLOYCTL_HOOK"] for line in lines(log)] == ["pre_up", "pre_down", "post_down"]
        assert lines(log)[-1]["DEPLOYCTL_RESULT"] == "ok" and lines(log)[-1]["DEPLOYCTL_ACTION"] == "down"
        assert [h["hook"] for h in history(bed, "e2e-hooks")[-1]["hooks"]] == ["pre_down", "post_down"]
    finally:
        deployctl("down", path, "--yes", "--skip", "hooks")
        bed.run_on("tb3", ["rm", "-f", on_host], check=False)


def test_a_failed_pre_hook_changes_nothing_a_failed_post_hook_marks_the_result_and_on_failure_follows_a_rollback(
        bed, deployctl):
    log = deployctl.tmp_path / "hooks.jsonl"
    name = "e2e-hooks"

    def write(hooks: dict, env: str = "") -> Path:
        return deployctl.write(bed.spec_yaml(name, MIXED, hosts_used=["tb3"], extra=MODEL + env + hooks_yaml(hooks)))

    refusing = {"pre_up": {"command": ["sh", "-c", "echo catalogue is closed; exit 9"]}}
    try:
        code, doc = deployctl.json("up", write(refusing), "--skip", "weights")
        assert code == 3 and doc["error"]["type"] == "HookFailed", doc
        assert doc["error"]["message"] == "(control): pre_up hook failed with exit code 9"
        assert "catalogue is closed" in doc["error"]["stderr_tail"]
        assert container_ids(bed, "tb3", name) == {}  # nothing changed
        assert history(bed, name)[-1]["result"] == "pre_up failed"

        slow = {"pre_up": {"command": ["sleep", "300"], "timeout": 1}}
        code, out, err = deployctl("up", write(slow), "--skip", "weights")
        assert code == 3 and "pre_up hook timed out after 1 s" in err and "Traceback" not in err
        assert container_ids(bed, "tb3", name) == {}
        assert history(bed, name)[-1]["hooks"][0]["result"] == "timed out"

        failing_post = {"post_up": {"command": ["sh", "-c", "echo smoke test failed; exit 4"]}}
        code, doc = deployctl.json("up", write(failing_post), "--skip", "weights")
        assert code == 1 and doc["error"]["message"] == "(control): post_up hook failed with exit code 4", doc
        assert len(container_ids(bed, "tb3", name)) == 1  # the deployment stays
        assert history(bed, name)[-1]["result"] == "post_up failed"

        # a deploy that fails (the server exits while loading) rolls back, then on_failure runs, told so
        broken = {"on_failure": record(log, "on_failure"), "post_up": record(log, "post_up")}
        code, doc = deployctl.json("up", write(broken, "env: {STANDIN_FAIL_HCCL_TIMEOUT: 1}\n"), "--skip", "weights",
                                   "--yes")
        assert code == 1, doc
        (failure,) = lines(log)  # no post_up after a failure
        assert failure["DEPLOYCTL_HOOK"] == "on_failure" and failure["DEPLOYCTL_RESULT"] == "rolled back"
        assert "e2e-hooks-mixed-0" in failure["DEPLOYCTL_ERROR"]
        assert [h["hook"] for h in history(bed, name)[-1]["hooks"]] == ["on_failure"]

        refusing_down = {"pre_down": {"command": ["false"]}}
        code, doc = deployctl.json("down", write(refusing_down), "--yes")
        assert code == 3 and "pre_down hook failed" in doc["error"]["message"]
        assert len(container_ids(bed, "tb3", name)) == 1  # nothing removed
    finally:
        deployctl("down", write({}), "--yes")


def argv_of_every_process() -> list[bytes]:
    """Every process's argv on this machine; the bed's hosts share its PID namespace, so theirs too."""
    words = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            words.append(Path(cmdline).read_bytes())
        except OSError:
            pass  # it ended meanwhile
    return words


def wait_until(ready, child, what: str) -> None:
    """Until the hook says it runs (`ready()`: the file it touched is the event), at most 120 s."""
    deadline = time.monotonic() + 120
    while not ready() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready(), f"the {what} hook never started"


def test_a_hook_secret_is_in_no_process_list_and_no_log(bed, deployctl):
    ready, go = deployctl.tmp_path / "ready", deployctl.tmp_path / "go"
    digest = deployctl.tmp_path / "digest"
    on_host, host_ready, host_go = "/tmp/e2e-hooks-secret", "/tmp/e2e-hooks-ready", "/tmp/e2e-hooks-go"
    wait = f'touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; printf %s "$TOKEN" | sha256sum > {digest}'
    wait_on_host = (f'touch {host_ready}; while [ ! -e {host_go} ]; do sleep 0.05; done; '
                    f'printf %s "$TOKEN" | sha256sum > {on_host}; echo token=$TOKEN')
    hooks = {"pre_up": {"command": ["sh", "-c", wait], "env": {"TOKEN": "${%s}" % VAR}},
             "post_up": {"command": ["sh", "-c", wait_on_host], "on": "hosts", "env": {"TOKEN": "${%s}" % VAR}}}
    path = deployctl.write(bed.spec_yaml("e2e-hooks", MIXED, hosts_used=["tb3"], extra=MODEL + hooks_yaml(hooks)))
    bed.run_on("tb3", ["rm", "-f", on_host, host_ready, host_go], check=False)
    child = deployctl_child("up", path, "--skip", "weights", "--verbose", env={**os.environ, VAR: SECRET})
    try:
        wait_until(ready.exists, child, "pre_up")
        words = argv_of_every_process()  # while the control machine's hook runs
        assert any(str(go).encode() in w for w in words), "the hook is not among the processes read"
        assert not any(SECRET.encode() in w for w in words)
        go.touch()
        wait_until(lambda: bed.run_on("tb3", ["test", "-e", host_ready], check=False).returncode == 0, child,
                   "post_up (on tb3)")
        words = argv_of_every_process()  # while the host's hook runs, over SSH
        assert any(host_go.encode() in w for w in words), "the host's hook is not among the processes read"
        assert not any(SECRET.encode() in w for w in words)
        bed.run_on("tb3", ["touch", host_go])
        code, out, err = child.finish(timeout=600)
        assert code == 0, err
        expected = hashlib.sha256(SECRET.encode()).hexdigest()
        assert digest.read_text().split()[0] == expected  # the hook got the value, through its environment
        assert bed.run_on("tb3", ["cat", on_host]).stdout.split()[0] == expected  # the host-side hook too
        assert SECRET not in out + err  # --verbose prints every step's work
        assert "${%s}" % VAR in err  # shown by its name
        record = history(bed, "e2e-hooks")[-1]
        assert [h["result"] for h in record["hooks"]] == ["ok", "ok"]
        assert SECRET not in bed.run_on("tb3", ["cat", "/var/lib/deployctl/e2e-hooks/history.jsonl"]).stdout
    finally:
        go.touch()  # a hook left waiting (the test failed before) ends now, not at its timeout
        bed.run_on("tb3", ["touch", host_go], check=False)
        child.kill()
        deployctl("down", path, "--yes", "--skip", "hooks")
        bed.run_on("tb3", ["rm", "-f", on_host, host_ready, host_go], check=False)


ROUTED = """image: {name: deployctl/standin-vllm:latest}
weights: {dest: /srv/weights/tiny}
model: {served_name: tiny, max_model_len: 2048, max_num_seqs: %d, max_num_batched_tokens: 2048}
env: {STANDIN_STARTUP_S: 0.5}
topology:
  mode: mixed
  front: {kind: vllm-router, host: tb1, port: 8790, image: "%s", policy: round_robin}
  instances:
    - {host: tb1, devices: [2], port: 8791}
    - {host: tb1, devices: [3], port: 8792}
"""


def test_pre_wave_and_post_wave_run_around_each_wave_of_a_drain_rollout_and_a_failed_one_stops_it(bed, deployctl):
    log = deployctl.tmp_path / "hooks.jsonl"
    hooks = hooks_yaml({"pre_wave": record(log, "pre_wave"), "post_wave": record(log, "post_wave")})
    name = "e2e-hookwave"

    def write(seqs: int, other: dict | None = None) -> Path:
        return deployctl.write(bed.spec_yaml(name, ROUTED % (seqs, router_image.IMAGE), hosts_used=["tb1"])
                               + (hooks_yaml(other) if other else hooks))

    try:
        code, doc = deployctl.json("up", write(8), "--skip", "weights")
        assert code == 0, doc
        assert not lines(log)  # a first deploy has no waves
        code, plan = deployctl.json("plan", write(16), "--skip", "weights")
        waves = [(e["hook"], e["wave"]) for e in plan["steps"] if e.get("type") == "hook"]
        assert waves == [("pre_wave", 1), ("post_wave", 1), ("pre_wave", 2), ("post_wave", 2)]
        code, doc = deployctl.json("up", write(16), "--skip", "weights", "--yes")
        assert code == 0, doc
        seen = [(line["DEPLOYCTL_HOOK"], line["DEPLOYCTL_WAVE"], line["DEPLOYCTL_WAVE_INSTANCES"]) for line in lines(log)]
        assert seen == [("pre_wave", "1", f"{name}-mixed-0"), ("post_wave", "1", f"{name}-mixed-0"),
                        ("pre_wave", "2", f"{name}-mixed-1"), ("post_wave", "2", f"{name}-mixed-1")]
        assert [h.get("wave") for h in history(bed, name, "tb1")[-1]["hooks"]] == [1, 1, 2, 2]

        # a failed pre_wave stops the rollout before its wave changes anything; the wave before stays
        before = container_ids(bed, "tb1", name)
        failing = {"pre_wave": {"command": ["sh", "-c", 'test "$DEPLOYCTL_WAVE" != 2']},
                   "on_failure": record(log, "on_failure")}
        code, doc = deployctl.json("up", write(32, failing), "--skip", "weights", "--yes")
        assert code == 1 and doc["error"]["type"] == "RolloutFailed", doc
        assert "pre_wave hook of wave 2" in doc["error"]["message"], doc
        after = container_ids(bed, "tb1", name)
        assert after[f"{name}-mixed-0"] != before[f"{name}-mixed-0"]  # wave 1 rolled out
        assert after[f"{name}-mixed-1"] == before[f"{name}-mixed-1"]  # wave 2 untouched
        assert lines(log)[-1]["DEPLOYCTL_HOOK"] == "on_failure"
        assert [(h["hook"], h.get("wave"), h["result"]) for h in history(bed, name, "tb1")[-1]["hooks"]] == [
            ("pre_wave", 1, "ok"), ("pre_wave", 2, "failed"), ("on_failure", None, "ok")]

        # a failed post_wave stops the rollout after its wave, which stays; the result says so
        before = after
        failing = {"post_wave": {"command": ["sh", "-c", "echo lb refused; exit 5"]}}
        code, doc = deployctl.json("up", write(64, failing), "--skip", "weights", "--yes")
        assert code == 1 and doc["error"]["type"] == "HookFailed", doc
        assert "post_wave hook of wave 1" in doc["error"]["message"] and "lb refused" in doc["error"]["stderr_tail"]
        after = container_ids(bed, "tb1", name)
        assert after[f"{name}-mixed-0"] != before[f"{name}-mixed-0"]  # its wave stays done
        assert after[f"{name}-mixed-1"] == before[f"{name}-mixed-1"]  # the rollout stopped there
        assert history(bed, name, "tb1")[-1]["result"] == "post_wave failed"
    finally:
        deployctl("down", write(16), "--yes")
