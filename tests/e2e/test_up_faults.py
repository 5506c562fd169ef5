"""Faults during `up`: Ctrl-C, a Docker daemon that is down, a container that crashes while starting.

Each ends in a clear message naming host and instance, the previous deployment running again, and a re-run
that converges.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.children import deployctl_child
from tests.e2e.conftest import MODEL, container_ids, http_json

MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb4, devices: [2, 3], port: 8580}\n"


def spec(bed, name, env=""):
    return bed.spec_yaml(name, MIXED, hosts_used=["tb4"], extra=MODEL + env)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except (subprocess.CalledProcessError, ValueError):
            pass  # not answering yet
        time.sleep(0.2)
    return False


def container_state(bed, host: str, name: str) -> str:
    out = bed.docker_on(host, "ps", "--all", "--filter", f"name=^{name}$", "--format", "{{.ID}} {{.State}}").stdout
    return out.strip()


def test_ctrl_c_while_waiting_for_health_restores_the_previous_container(bed, deployctl):
    good = spec(bed, "e2e-int")
    path = deployctl.write(good)
    try:
        assert deployctl("up", path, "--skip", "weights")[0] == 0
        before = container_ids(bed, "tb4", "e2e-int")
        # The new container never becomes healthy while the test runs, however loaded the machine is.
        path.write_text(spec(bed, "e2e-int", env="env: {STANDIN_STARTUP_S: '900'}\n"))
        child = deployctl_child("up", path, "--skip", "weights", "--yes")
        # Interrupt once up waits for health: it has started the step that runs the new container (its line
        # printed), the old one is renamed .previous, and the new one runs under the name (events, not time).
        assert child.stderr.wait_for("start  workers tb4 e2e-int-mixed-0", timeout=120), child.stderr.text(0)
        old_id = before["e2e-int-mixed-0"]
        assert wait_for(lambda: "e2e-int-mixed-0.previous" in container_ids(bed, "tb4", "e2e-int"), timeout=120)
        assert wait_for(lambda: container_state(bed, "tb4", "e2e-int-mixed-0").endswith(" running")
                        and not container_state(bed, "tb4", "e2e-int-mixed-0").startswith(old_id[:12]),
                        timeout=120)
        child.interrupt()
        code, out, err = child.finish(timeout=300)
        assert code == 130, err
        assert "interrupted" in err and "state after rollback" in out, err
        assert container_ids(bed, "tb4", "e2e-int") == before  # the same container, nothing left over
        assert wait_for(lambda: http_json(bed, "tb4", 8580, "/v1/models")["data"][0]["id"] == "tiny", timeout=120)
        lock = bed.run_on("tb4", ["ls", "/var/lib/deployctl/e2e-int"]).stdout.split()
        assert "lock" not in lock and "history.jsonl" in lock
        history = bed.run_on("tb4", ["tail", "-n", "1", "/var/lib/deployctl/e2e-int/history.jsonl"]).stdout
        assert '"result": "interrupted"' in history
        path.write_text(good)
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["changed"] is False
    finally:
        deployctl("down", path, "--yes")


def test_docker_daemon_down_is_a_clear_error_and_a_rerun_converges(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-dockerd"))
    bed.stop_dockerd("tb4")
    try:
        code, out, err = deployctl("up", path, "--skip", "weights")
        # Facts are gathered before any check or change: the daemon's absence is a host error (exit 1).
        assert code == 1
        assert "error: tb4 (10.200.0.14): the Docker daemon is not reachable\n" in err
        assert "hint: start it (systemctl start docker) and check `docker ps` on the host" in err
        assert "Traceback" not in err
    finally:
        bed.start_dockerd("tb4")
    try:
        code, doc = deployctl.json("up", path, "--skip", "weights")
        assert code == 0 and doc["instances"][0]["healthy"]
    finally:
        deployctl("down", path, "--yes")


def test_container_that_crashes_at_start_fails_at_once_with_its_log(bed, deployctl):
    path = deployctl.write(spec(bed, "e2e-crash").replace("dest: /srv/weights/tiny", "dest: /srv/weights/none"))
    health_timeout = 300  # about 30 times what the whole `up` takes here: only sitting it out goes past it
    start = time.monotonic()
    code, out, err = deployctl("up", path, "--skip", "weights", "--health-timeout", str(health_timeout))
    # at once: the container's exit ends the wait (its own message, not the timeout's), well before the timeout
    assert code == 1 and time.monotonic() - start < health_timeout
    assert "e2e-crash-mixed-0 exited while starting" in err and "not healthy after" not in err
    assert "refusing to start" in err  # the container's own last log lines
    assert container_ids(bed, "tb4", "e2e-crash") == {}


def sshd_pids(bed, host: str) -> list[int]:
    """sshd processes (listener and sessions) inside one host's network namespace only."""
    pids = subprocess.run(["ip", "netns", "pids", bed.host(host).netns], capture_output=True, text=True).stdout.split()
    found = []
    for pid in pids:
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "sshd":
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_host_that_drops_mid_up_is_named_and_a_rerun_converges(bed, deployctl):
    from tests.testbed import hosts

    good = spec(bed, "e2e-drop")
    path = deployctl.write(good)
    try:
        assert deployctl("up", path, "--skip", "weights")[0] == 0
        path.write_text(spec(bed, "e2e-drop", env="env: {STANDIN_STARTUP_S: '60'}\n"))
        child = deployctl_child("up", path, "--skip", "weights", "--yes")
        assert wait_for(lambda: "e2e-drop-mixed-0.previous" in container_ids(bed, "tb4", "e2e-drop"))
        for pid in sshd_pids(bed, "tb4"):  # the host drops off the network mid-deploy
            os.kill(pid, signal.SIGKILL)
        code, out, err = child.finish(timeout=120)
        assert code == 1, err
        assert "tb4 (10.200.0.14)" in err and "Traceback" not in err
    finally:
        hosts.start_sshd(bed.host("tb4"))
        assert wait_for(lambda: hosts._tcp_open("10.200.0.14", 22))
    try:
        path.write_text(good)  # the host is back: the re-run converges on the spec
        code, doc = deployctl.json("up", path, "--skip", "weights", "--yes")
        assert code == 0, doc
        assert [(i["state"], i["healthy"]) for i in doc["instances"]] == [("running", True)]
        assert list(container_ids(bed, "tb4", "e2e-drop")) == ["e2e-drop-mixed-0"]
    finally:
        deployctl("down", path, "--yes")
