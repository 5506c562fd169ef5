"""Waits on the object store: a silent or closed S3 endpoint is named, announced, bounded, and Ctrl-C acts."""

from __future__ import annotations

import socket

from tests.children import Child, deployctl_child
from tests.testbed.tarpit import Tarpit

MIXED = "topology:\n  mode: mixed\n  instances:\n    - {host: tb1, devices: [0], port: 8590}\n"


def spec(bed, endpoint: str) -> str:
    weights = f"weights: {{source: s3://models/tiny/, dest: /srv/weights/tiny, endpoint: '{endpoint}'}}\n"
    model = "model: {served_name: tiny, max_model_len: 2048, max_num_seqs: 16, max_num_batched_tokens: 2048}\n"
    return bed.spec_yaml("e2e-waits", MIXED, hosts_used=["tb1"],
                         extra="image: {name: deployctl/standin-vllm:latest}\n" + weights + model)


def sync(bed, path) -> Child:
    return deployctl_child("weights", "sync", path, "--dry-run", env=bed.s3.env())


def test_a_silent_s3_endpoint_is_announced_and_ctrl_c_exits_at_once(testbed, tmp_path):
    with Tarpit() as tarpit:
        endpoint = f"http://127.0.0.1:{tarpit.port}"
        path = tmp_path / "spec.yaml"
        path.write_text(spec(testbed, endpoint))
        child = sync(testbed, path)
        try:
            # the event: deployctl says what it waits for
            assert child.stderr.wait_for("weights: contacting S3 endpoint", timeout=120), child.stderr.text(0)
            assert child.stderr.seen[-1] == f"weights: contacting S3 endpoint {endpoint} (listing s3://models/tiny/)…\n"
            assert tarpit.accepted.wait(60)
            child.interrupt()
            code, out, err = child.finish(timeout=60)  # bounded; 130 only if Ctrl-C ended it
        finally:
            child.kill()
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_a_closed_s3_endpoint_is_an_error_naming_it(testbed, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    path = tmp_path / "spec.yaml"
    path.write_text(spec(testbed, endpoint))
    code, out, err = sync(testbed, path).finish(timeout=120)
    assert code == 1, err
    assert (f"error: weights: cannot reach the S3 endpoint {endpoint} (cannot connect, 3 attempts of 5 s) "
            "listing s3://models/tiny/\n") in err
    assert "hint: check weights.endpoint and the network" in err
