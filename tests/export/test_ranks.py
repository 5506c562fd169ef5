"""A worker template's command, run as the kubelet and a shell would run it: its rank from the worker index, its
DP master the leader's resolved IP."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.export.cases import exported


def kubelet_expand(text: str, env: dict) -> str:
    """Kubernetes' $(VAR) expansion of command words: `$$` is a `$`, an undefined $(VAR) stays as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def worker_container(spec: str, target: str, index: int = 0) -> dict:
    body = exported(spec, target)[0].body
    if target == "lws":
        template = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    else:
        template = body["spec"]["template"]["roles"][0]["workerTemplate"]
    return template["spec"]["containers"][index]


@pytest.fixture
def fake_bin(tmp_path):
    """getent that knows one name, and a `vllm` that prints its argv one word per line."""
    (tmp_path / "getent").write_text('#!/bin/sh\n[ "$2" = leader.svc ] && echo "10.0.0.7        leader.svc"\n')
    (tmp_path / "vllm").write_text('#!/bin/sh\nfor w in "$@"; do echo "$w"; done\n')
    for name in ("getent", "vllm"):
        (tmp_path / name).chmod(0o755)
    return tmp_path


def run(container: dict, env: dict, fake_bin) -> subprocess.CompletedProcess:
    # vllm-ascend runs through the image's entrypoint: its words are `args` (the image here has none)
    argv = [kubelet_expand(word, env) for word in container.get("args") or container["command"]]
    assert argv[:2] == ["sh", "-c"]
    environ = {"PATH": f"{fake_bin}:{os.environ['PATH']}", **env}
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=10)


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
    """qwen3-pd's decode: dp 8 over 2 hosts, 4 ranks a host: worker 1's containers are ranks 4..7."""
    spec = "playbooks/vllm-ascend-pd-qwen3.yaml"
    body = next(m.body for m in exported(spec, "lws") if m.name == "qwen3-pd-decode0")
    containers = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    ranks = []
    for container in containers:
        lines = run(container, {"LWS_LEADER_ADDRESS": "leader.svc", "LWS_WORKER_INDEX": "1"}, fake_bin).stdout
        ranks.append(flag(lines.splitlines(), "--data-parallel-rank"))
    assert ranks == ["4", "5", "6", "7"]


def test_an_unresolvable_leader_stops_the_worker(fake_bin):
    container = worker_container("playbooks/vllm-ascend-mixed-2hosts-internal.yaml", "lws")
    done = run(container, {"LWS_LEADER_ADDRESS": "nowhere.svc", "LWS_WORKER_INDEX": "1"}, fake_bin)
    assert done.returncode == 1 and "cannot resolve nowhere.svc" in done.stderr and done.stdout == ""
