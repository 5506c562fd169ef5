"""A graceful stop of the real vLLM engine: with `server_version` naming the image's vLLM (0.32.0, past 0.18.0),
deployctl starts it with `--shutdown-timeout 30`, and `down` (`docker stop --time 30`) lets a streaming request in
flight finish (the control, vLLM's abort without the flag, is test_differential's on loopback)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.load import HeldRequest
from tests.real_engine.conftest import HOST, real_spec

pytestmark = pytest.mark.real_engine

NAME = "re-stop"
PORT = 8630


def deploy_stream_and_down(bed, deployctl, server_version) -> tuple[tuple, list, int]:
    """up, one long stream started, down while it streams: (how it ended, the server's argv, chunks at down)."""
    path = deployctl.write(real_spec(bed, NAME, (PORT,), server_version=server_version), name=f"{NAME}.yaml")
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        argv = json.loads(bed.docker_on(HOST, "inspect", f"{NAME}-mixed-0").stdout)[0]["Args"]
        with HeldRequest(f"http://10.200.0.11:{PORT}", 400, ignore_eos=True) as held:
            at_down = held.chunks
            code, out, err = deployctl("down", path, "--yes")
            assert code == 0, err
        return (held.finish_reason, held.cut), argv, at_down
    finally:
        deployctl("down", path, "--yes")
        assert container_ids(bed, HOST, NAME) == {}


def test_down_lets_a_request_in_flight_finish_within_the_shutdown_timeout(real_bed, deployctl):
    (reason, cut), argv, at_down = deploy_stream_and_down(real_bed, deployctl, "0.32.0")
    assert argv[argv.index("--shutdown-timeout") + 1] == "30"
    assert at_down < 400  # it was still streaming when down began
    assert (reason, cut) == ("length", "")  # all 400 tokens, then [DONE]

    # The control (the same spec without server_version: no --shutdown-timeout, so vLLM aborts what runs at
    # SIGTERM) is tests/real_engine/test_differential.py::test_sigterm_with_a_request_in_flight on loopback. Run
    # here through `down` with the engine core paused, its outcome varied between runs on this loaded 2-core
    # machine (a cut stream; an end without all tokens; once all 400 tokens), so it is not asserted here.
