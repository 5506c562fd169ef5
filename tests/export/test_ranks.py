"""A worker template's command, run as the kubelet and a shell would run it: its rank from the worker index, its
DP master the leader's resolved IP."""

from __future__ import annotations

import os
import subprocess

import pytest

from deployctl.export.ranks import LEADER_RETRY_S, LEADER_WAIT_S
from tests.export.cases import exported
from tests.export.test_expansion import expand as kubelet_expand


def worker_container(spec: str, target: str, index: int = 0, role: str = "") -> dict:
    """The worker template's container `index` of the LWS named <deployment>-<role>, or of Kthena's role `role`
    (the first object / role when none is named)."""
    manifests = exported(spec, target)
    if target == "lws":
        body = next(m.body for m in manifests if m.name.endswith(role) and m.body["kind"] == "LeaderWorkerSet")
        template = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    else:
        roles = manifests[0].body["spec"]["template"]["roles"]
        template = next(r for r in roles if r["name"] == role or not role)["workerTemplate"]
    return template["spec"]["containers"][index]


# Time is emulated: `sleep` adds its seconds to a clock file instead of waiting, and `getent` knows leader.svc
# only once the clock reaches LEADER_APPEARS_AT (a leader whose DNS record is published late).
FAKE_SLEEP = '#!/bin/sh\necho $(( $(cat "$FAKE_CLOCK") + $1 )) > "$FAKE_CLOCK"\n'
FAKE_GETENT = ('#!/bin/sh\n[ "$2" = leader.svc ] && [ "$(cat "$FAKE_CLOCK")" -ge "$LEADER_APPEARS_AT" ] '
               '&& echo "10.0.0.7        leader.svc"\n')


@pytest.fixture
def fake_bin(tmp_path):
    """getent that knows one name (from a given time on), a `sleep` that only moves the clock, and a `vllm` that
    prints its argv one word per line."""
    (tmp_path / "getent").write_text(FAKE_GETENT)
    (tmp_path / "sleep").write_text(FAKE_SLEEP)
    (tmp_path / "vllm").write_text('#!/bin/sh\nfor w in "$@"; do echo "$w"; done\n')
    for name in ("getent", "sleep", "vllm"):
        (tmp_path / name).chmod(0o755)
    (tmp_path / "clock").write_text("0\n")
    return tmp_path


def run(container: dict, env: dict, fake_bin, appears_at: int = 0) -> subprocess.CompletedProcess:
    # vllm-ascend runs through the image's entrypoint: its words are `args` (the image here has none)
    argv = [kubelet_expand(word, env) for word in container.get("args") or container["command"]]
    assert argv[:2] == ["sh", "-c"]
    environ = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_CLOCK": str(fake_bin / "clock"),
               "LEADER_APPEARS_AT": str(appears_at), **env}
    return subprocess.run(["/bin/sh", *argv[1:]], env=environ, capture_output=True, text=True, timeout=120)


def clock(fake_bin) -> int:
    return int((fake_bin / "clock").read_text())


def flag(lines: list[str], name: str) -> str:
    return lines[lines.index(name) + 1]


@pytest.mark.parametrize("target,leader,index", [("lws", "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"),
                                                 ("kthena", "ENTRY_ADDRESS", "WORKER_INDEX")])
def test_internal_worker_starts_at_its_hosts_first_rank(fake_bin, target, leader, index):
    container = worker_container("playbooks/vllm-ascend-mixed-2hosts-internal.yaml", target)
    done = run(container, {leader: "leader.svc", index: "1"}, fake_bin)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert flag(lines, "--data-parallel-start-rank") == "2"  # dp 4 over 2 hosts: host 1 runs ranks 2 and 3
    assert flag(lines, "--data-parallel-address") == "10.0.0.7"
    assert "--headless" in lines and "--port" not in lines
    assert flag(lines, "--data-parallel-size-local") == "2"


def test_external_workers_each_run_their_rank(fake_bin):
    """qwen3-pd's decode: dp 8 over 2 hosts, 4 ranks a host: worker 1's containers are ranks 4..7 (on a stack
    that keeps a container per rank: plain)."""
    spec = "playbooks/vllm-ascend-pd-qwen3.yaml"
    body = next(m.body for m in exported(spec, "lws", "plain") if m.name == "qwen3-pd-decode0")
    containers = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    ranks = []
    for container in containers:
        lines = run(container, {"LWS_LEADER_ADDRESS": "leader.svc", "LWS_WORKER_INDEX": "1"}, fake_bin).stdout
        ranks.append(flag(lines.splitlines(), "--data-parallel-rank"))
    assert ranks == ["4", "5", "6", "7"]


@pytest.mark.parametrize("target,leader,index", [("lws", "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"),
                                                 ("kthena", "ENTRY_ADDRESS", "WORKER_INDEX")])
def test_a_worker_waits_for_a_leader_that_appears_after_30_s(fake_bin, target, leader, index):
    container = worker_container("playbooks/vllm-ascend-mixed-2hosts-internal.yaml", target)
    done = run(container, {leader: "leader.svc", index: "1"}, fake_bin, appears_at=30)
    assert done.returncode == 0, done.stderr
    assert flag(done.stdout.splitlines(), "--data-parallel-address") == "10.0.0.7"  # exec'd, with the address
    assert clock(fake_bin) == 30  # it tried every LEADER_RETRY_S until the name resolved, and no longer
    assert f"waiting for the leader leader.svc to resolve (try {30 // LEADER_RETRY_S} of" in done.stderr


@pytest.mark.parametrize("target,leader,index", [("lws", "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"),
                                                 ("kthena", "ENTRY_ADDRESS", "WORKER_INDEX")])
def test_a_whole_node_worker_waits_for_a_late_leader_too(fake_bin, target, leader, index):
    """qwen3-pd's decode on mindcluster: a container per rank rewritten to one per pod (whole_nodes.py); its
    worker pod runs host 2's four ranks headless from start rank 4, once the leader's name resolves at 30 s."""
    role = "decode0" if target == "lws" else "decode"
    container = worker_container("playbooks/vllm-ascend-pd-qwen3.yaml", target, role=role)
    done = run(container, {leader: "leader.svc", index: "1"}, fake_bin, appears_at=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert flag(lines, "--data-parallel-start-rank") == "4" and flag(lines, "--data-parallel-size-local") == "4"
    assert flag(lines, "--data-parallel-address") == "10.0.0.7" and "--headless" in lines
    assert clock(fake_bin) == 30


def test_an_unresolvable_leader_stops_the_worker_after_the_bound(fake_bin):
    container = worker_container("playbooks/vllm-ascend-mixed-2hosts-internal.yaml", "lws")
    done = run(container, {"LWS_LEADER_ADDRESS": "nowhere.svc", "LWS_WORKER_INDEX": "1"}, fake_bin)
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.splitlines()[-1]
    tries = LEADER_WAIT_S // LEADER_RETRY_S
    assert last.startswith(f"cannot resolve the leader nowhere.svc (LWS_LEADER_ADDRESS): gave up after {tries} "
                           f"tries {LEADER_RETRY_S} s apart")
    assert clock(fake_bin) == (tries - 1) * LEADER_RETRY_S  # it slept between tries, not after the last
