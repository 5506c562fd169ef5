"""`deployctl up / down / status` on the test bed, with the stand-in inference image (issue: up/plan/down)."""

from __future__ import annotations

import json
import re


from tests.e2e.conftest import MODEL, container_ids, http_json


def spec(bed, name, topology, hosts, env=""):
    return bed.spec_yaml(name, topology, hosts_used=hosts, extra=MODEL + env)


MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb3, devices: [0, 1], port: 8180}\n"


def test_mixed_one_host_serves_rerun_is_noop_and_down_removes_only_its_own(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-mixed", MIXED, ["tb3"]))
    bed.docker_on("tb3", "run", "--detach", "--name", "bystander", "--init", bed.base_image, "sleep", "300")
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is True
        assert doc["endpoint"] == "http://10.200.0.13:8180"
        assert doc["smoke"]["e2e-mixed-mixed-0"]
        assert [(i["name"], i["state"], i["healthy"]) for i in doc["instances"]] == [("e2e-mixed-mixed-0", "running", True)]
        before = container_ids(bed, "tb3", "e2e-mixed")

        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
        assert container_ids(bed, "tb3", "e2e-mixed") == before

        code, out, err = deployctl("plan", path, "--skip", "weights")  # as the up before it ran
        assert code == 0 and "nothing to change" in out

        code, doc = deployctl.json("status", path)
        assert doc["instances"][0]["healthy"] is True
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0
        assert container_ids(bed, "tb3", "e2e-mixed") == {}
        assert "bystander" in bed.docker_on("tb3", "ps", "--format", "{{.Names}}").stdout
        bed.docker_on("tb3", "rm", "--force", "bystander")


PD_ONE_HOST = """topology:
  mode: disaggregated
  scheduler: {host: tb4, port: 9100}
  prefill:
    - {host: tb4, devices: [4, 5], port: 8188}
  decode:
    - {host: tb4, devices: [6, 7], port: 8189}
"""


def test_disaggregated_on_one_host_seed_001_layout(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-pd1", PD_ONE_HOST, ["tb4"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert doc["endpoint"] == "http://10.200.0.14:9100"
        info = http_json(bed, "tb4", 8188, "/standin/info")
        assert info["role"] == "prefill" and info["node_ports"] == [8188, 8189] and info["tp"] == 2
        assert http_json(bed, "tb4", 8189, "/standin/info")["role"] == "decode"
        assert http_json(bed, "tb4", 9100, "/standin/info")["role"] == "scheduler"
        local = (path.parent / ".deployctl/e2e-pd1/ranktables/global_ranktable_merge.json").read_text()
        assert json.loads(local)["server_group_list"][1]["server_list"][0]["device"][0]["device_ip"].startswith("10.201.")
    finally:
        deployctl("down", path, "--yes")


PD_TWO_HOSTS = """topology:
  mode: disaggregated
  scheduler: {host: tb1, port: 9200}
  prefill:
    - {host: tb1, devices: [0, 1], port: 8288}
    - {host: tb1, devices: [2, 3], port: 8290}
  decode:
    - {host: tb2, devices: [0, 1], port: 8289%s}
    - {host: tb2, devices: [2, 3], port: 8291}
"""


def test_two_hosts_two_prefill_two_decode_repair_and_targeted_replace(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-pd2", PD_TWO_HOSTS % "", ["tb1", "tb2"]))
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0, doc
        assert all(i["healthy"] for i in doc["instances"]) and len(doc["instances"]) == 5
        info = http_json(bed, "tb2", 8291, "/standin/info")
        assert info["role"] == "decode" and info["node_ports"] == [8288, 8290, 8289, 8291]
        before = {**container_ids(bed, "tb1", "e2e-pd2"), **container_ids(bed, "tb2", "e2e-pd2")}

        # A container that died is recreated, and nothing else is touched.
        bed.docker_on("tb2", "rm", "--force", "e2e-pd2-decode-1")
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is True
        after = {**container_ids(bed, "tb1", "e2e-pd2"), **container_ids(bed, "tb2", "e2e-pd2")}
        assert {n for n in after if after[n] != before.get(n)} == {"e2e-pd2-decode-1"}

        # decode-0's own model settings replace decode-0 and nothing else.
        path.write_text(spec(bed, "e2e-pd2", PD_TWO_HOSTS % ", model: {max_num_seqs: 8}", ["tb1", "tb2"]))
        code, out, err = deployctl("up", path, "--skip", "weights")
        assert code == 2 and "--yes" in err  # no terminal: replacing needs --yes
        code, doc = deployctl.json("up", path, "--skip", "weights", "--yes")
        assert code == 0
        final = {**container_ids(bed, "tb1", "e2e-pd2"), **container_ids(bed, "tb2", "e2e-pd2")}
        assert {n for n in final if final[n] != after.get(n)} == {"e2e-pd2-decode-0"}
        assert not any(n.endswith(".previous") for n in final)
    finally:
        deployctl("down", path, "--yes")


def test_two_concurrent_ups_exactly_one_proceeds_every_time(bed, deployctl, tmp_path):
    """Two real `deployctl up` processes released together (each blocked reading its spec from a FIFO until the
    test writes both): one takes the lock, the other is refused naming it. The holder is stopped (SIGSTOP) as soon
    as its note is on the host, so the other cannot simply run after it: five rounds, each a real replace."""
    import getpass
    import os
    import signal
    import socket
    import subprocess
    import sys

    from tests.e2e.test_up_faults import wait_for

    topology = MIXED.replace("8180", "8181").replace("[0, 1]", "[2, 3]")
    holder_file = bed.host("tb3").dir / "var-lib-deployctl" / "e2e-lock" / "lock" / "holder"
    history = bed.host("tb3").dir / "var-lib-deployctl" / "e2e-lock" / "history.jsonl"
    path = deployctl.write(spec(bed, "e2e-lock", topology, ["tb3"]))
    bed.run_on("tb3", ["rm", "-rf", "/var/lib/deployctl/e2e-lock"])
    try:
        for round_ in range(5):
            text = spec(bed, "e2e-lock", topology, ["tb3"], env=f"env: {{ROUND: '{round_}'}}\n")
            fifos = [tmp_path / f"round{round_}-{i}.yaml" for i in (0, 1)]
            for fifo in fifos:
                os.mkfifo(fifo)
            procs = [subprocess.Popen([sys.executable, "-m", "deployctl", "up", str(fifo), "--skip", "weights",
                                       "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "NO_COLOR": "1"}) for fifo in fifos]
            for fifo in fifos:  # each open waits for its reader: both processes are at the spec read
                with open(fifo, "w") as stream:
                    stream.write(text)

            def holder():
                try:
                    note = json.loads(holder_file.read_text())
                except (OSError, ValueError):  # not there yet, or being written
                    return None
                return note if note.get("pid") in [p.pid for p in procs] else None

            assert wait_for(lambda: holder() is not None), [p.communicate() for p in procs]
            winner = next(p for p in procs if p.pid == holder()["pid"])
            loser = next(p for p in procs if p is not winner)
            os.kill(winner.pid, signal.SIGSTOP)
            try:
                out, err = loser.communicate(timeout=120)
            finally:
                os.kill(winner.pid, signal.SIGCONT)
            assert loser.returncode == 1, err
            assert (f"deployment is locked by another deploy: up by {getpass.getuser()}@{socket.gethostname()} "
                    f"(pid {winner.pid})") in err
            out, err = winner.communicate(timeout=300)
            assert winner.returncode == 0, err
            # Only the winner wrote its line, and the lock is free again.
            assert len(history.read_text().splitlines()) == round_ + 1
            assert not holder_file.parent.exists()
    finally:
        deployctl("down", path, "--yes")
        bed.run_on("tb3", ["rm", "-rf", "/var/lib/deployctl/e2e-lock"])


def test_instance_that_never_becomes_healthy_rolls_back_to_the_previous(bed, deployctl):
    good = spec(bed, "e2e-rb", MIXED.replace("8180", "8182").replace("[0, 1]", "[4, 5]"), ["tb3"])
    path = deployctl.write(good)
    try:
        assert deployctl("up", path, "--skip", "weights")[0] == 0
        before = container_ids(bed, "tb3", "e2e-rb")
        path.write_text(good + "env: {STANDIN_NEVER_READY: '1'}\n")
        code, out, err = deployctl("up", path, "--skip", "weights", "--yes", "--health-timeout", "3")
        assert code == 1 and "not healthy after 3 s" in err and "rolled back" in err
        assert container_ids(bed, "tb3", "e2e-rb") == before  # the same container, running again
        assert http_json(bed, "tb3", 8182, "/v1/models")["data"][0]["id"] == "tiny"  # serving again
        path.write_text(good)
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
    finally:
        deployctl("down", path, "--yes")


def test_missing_image_fails_clearly_and_changes_nothing(bed, deployctl):
    text = spec(bed, "e2e-noimg", MIXED.replace("8180", "8183").replace("[0, 1]", "[6, 7]"), ["tb3"])
    path = deployctl.write(text.replace("deployctl/standin-vllm:latest", "deployctl/not-here:1"))
    code, out, err = deployctl("up", path, "--skip", "weights")
    assert code == 1
    assert "tb3 (10.200.0.13)" in err and "docker pull deployctl/not-here:1" in err
    assert "Traceback" not in err
    assert container_ids(bed, "tb3", "e2e-noimg") == {}


def test_secret_env_reaches_the_container_only_through_a_0600_file(bed, deployctl, monkeypatch):
    monkeypatch.setenv("E2E_TOKEN", "tok-4f9a1c-sekrit")
    text = spec(bed, "e2e-secret", MIXED.replace("8180", "8184").replace("[0, 1]", "[0, 1]").replace("tb3", "tb4"),
                ["tb4"], env="env: {API_TOKEN: '${E2E_TOKEN}'}\n")
    path = deployctl.write(text)
    try:
        code, out, err = deployctl("plan", path, "--skip", "weights")
        assert code == 0 and "tok-4f9a1c-sekrit" not in out + err
        code, out, err = deployctl("up", path, "--skip", "weights")
        assert code == 0 and "tok-4f9a1c-sekrit" not in out + err
        env_file = "/var/lib/deployctl/e2e-secret/env/e2e-secret-mixed-0.env"
        assert bed.run_on("tb4", ["stat", "--format", "%a", env_file]).stdout.strip() == "600"
        inspect = bed.docker_on("tb4", "inspect", "e2e-secret-mixed-0").stdout
        assert "API_TOKEN=tok-4f9a1c-sekrit" in inspect  # docker keeps env; but never in argv:
        args = json.loads(inspect)[0]["Args"]
        assert not any("tok-4f9a1c" in a for a in args)
    finally:
        deployctl("down", path, "--yes")


def test_logs_prefix_each_line_with_its_instance_and_up_bench_measures(bed, deployctl, tmp_path):
    path = deployctl.write(spec(bed, "e2e-logs", MIXED.replace("8180", "8185").replace("[0, 1]", "[6, 7]"), ["tb3"]))
    try:
        code, out, err = deployctl("up", path, "--skip", "weights", "--bench")
        assert code == 0, err
        # The short bench after the deploy: both runs, every request answered, and its table.
        assert "bench after up: e2e-logs at http://10.200.0.13:8185" in out
        assert "bench static: 2 run(s) against http://10.200.0.13:8185 (tiny, completions)" in err
        runs = re.findall(r"^  parallel_num=(\d) 128/32: (\d+)/(\d+) ok, [\d.]+ req/s, [\d.]+ out tok/s, "
                          r"TTFT p50 \d+\.\d ms$", err, re.MULTILINE)
        assert runs == [("1", "2", "2"), ("4", "8", "8")], err
        code, out, err = deployctl("logs", path, "--tail", "2")
        assert code == 0
        assert out.splitlines() == ["e2e-logs-mixed-0 | standin: startup complete: serving on http://0.0.0.0:8185",
                                    "e2e-logs-mixed-0 | INFO:     Application startup complete."]
        code, out, err = deployctl("logs", path, "no-such-instance")
        assert code == 2 and "instances: e2e-logs-mixed-0" in err
    finally:
        deployctl("down", path, "--yes")
