"""Connecting through the CLI to hosts that never answer: bounded by --connect-timeout, Ctrl-C acts at once.

The hosts are on loopback: a tarpit (accepts TCP, never sends the SSH banner) and a closed port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.children import deployctl_child
from tests.testbed.tarpit import Tarpit

TIMEOUT_S = 2


def spec_text(hosts: dict[str, tuple[str, int]], tmp_path) -> str:
    lines = "".join(f"  {name}: {{address: {addr}, port: {port}}}\n" for name, (addr, port) in hosts.items())
    instances = "".join(f"    - {{host: {name}, devices: [0], port: 8000}}\n" for name in hosts)
    return ("version: 1\nname: tarpit\nplatform: ascend\nserver: vllm\n"
            f"ssh: {{user: root, known_hosts: {tmp_path}/known_hosts, identity_file: {tmp_path}/id}}\n"
            f"hosts:\n{lines}"
            "image: {name: deployctl/standin-vllm:latest}\n"
            "weights: {source: s3://models/tiny/, dest: /srv/weights/tiny}\n"
            "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
            f"topology:\n  mode: mixed\n  instances:\n{instances}")


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return server.getsockname()[1]


def deployctl(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deployctl", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.parametrize("command", [["status"], ["down", "--yes"], ["doctor"]])
def test_a_host_that_never_sends_its_banner_fails_within_the_connect_timeout(tmp_path, command):
    with Tarpit() as tarpit:
        spec = tmp_path / "spec.yaml"
        spec.write_text(spec_text({"pit": (tarpit.address, tarpit.port)}, tmp_path))
        process = deployctl(*command, str(spec), "--connect-timeout", str(TIMEOUT_S))
        out, err = process.communicate(timeout=60)  # the bound of the test itself; the message says why it ended
    assert tarpit.accepted.is_set()
    where = f"127.0.0.1:{tarpit.port}"
    assert f"waiting for pit ({where})…" in err
    assert f"timed out waiting for the SSH banner from {where} after {TIMEOUT_S} s" in out + err
    assert "No existing session" not in out + err
    assert process.returncode == (3 if command == ["doctor"] else 1), err


def test_a_refused_connection_names_host_and_port(tmp_path):
    port = closed_port()
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text({"gone": ("127.0.0.1", port)}, tmp_path))
    process = deployctl("status", str(spec))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert err.strip().splitlines()[-1] == f"error: gone (127.0.0.1): cannot connect to 127.0.0.1:{port}: connection refused"


def test_ctrl_c_while_waiting_for_a_banner_exits_130_at_once(tmp_path):
    with Tarpit() as tarpit:
        spec = tmp_path / "spec.yaml"
        spec.write_text(spec_text({"pit": (tarpit.address, tarpit.port)}, tmp_path))
        child = deployctl_child("status", str(spec), "--connect-timeout", "60")
        try:
            # the event: deployctl says it is waiting for the host
            assert child.stderr.wait_for("giving up after 60 s", timeout=60), child.stderr.text(0)
            assert child.stderr.seen[-1].startswith("waiting for pit (")
            child.interrupt()
            code, out, err = child.finish(timeout=45)  # ends before the 60 s connect timeout could end it
        finally:
            child.kill()
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err
