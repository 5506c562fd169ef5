"""`deployctl up` deploying the real vLLM engine (its CPU build, in an image on a bed host) as a user deploys vLLM on
a GPU host: weights from S3, the health barrier, the smoke request and the all-pairs temperature-0 answer check
against vLLM itself, a re-run that changes nothing, status, down."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e.conftest import container_ids
from tests.real_engine.conftest import HOST, real_spec

pytestmark = pytest.mark.real_engine

ADDRESS = "10.200.0.11"
PORTS = (8600, 8601)
NAME = "re-up"


def completion(bed, port: int) -> dict:
    body = json.dumps({"model": "tiny", "prompt": "Say hello", "max_tokens": 4, "temperature": 0})
    out = bed.run_on(HOST, ["curl", "--silent", "--max-time", "60", "-H", "Content-Type: application/json",
                            "-d", body, f"http://127.0.0.1:{port}/v1/completions"]).stdout
    return json.loads(out)


def test_up_serves_the_real_engine_rerun_changes_nothing_status_and_down(real_bed, deployctl):
    bed = real_bed
    path = deployctl.write(real_spec(bed, NAME, PORTS), name=f"{NAME}.yaml")
    try:
        began = time.monotonic()
        code, doc = deployctl.json("up", path, "--yes")
        wall = time.monotonic() - began
        assert code == 0 and doc["changed"] is True, deployctl.failed
        assert doc["endpoint"] == f"http://{ADDRESS}:{PORTS[0]}"
        assert set(doc["smoke"]) == {f"{NAME}-mixed-0", f"{NAME}-mixed-1"}
        assert [(i["state"], i["healthy"]) for i in doc["instances"]] == [("running", True)] * 2

        # The server is vLLM itself: its fingerprint in every answer, its engine core process in the container
        # (vllm/v1/engine/core.py names it VLLM::EngineCore; a process's comm holds 15 characters).
        for port in PORTS:
            answer = completion(bed, port)
            assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", answer["system_fingerprint"]), answer
            assert answer["usage"]["completion_tokens"] == 4
        for name in (f"{NAME}-mixed-0", f"{NAME}-mixed-1"):
            comms = bed.docker_on(HOST, "exec", name, "sh", "-c", "cat /proc/[0-9]*/comm").stdout
            assert "VLLM::EngineCor" in comms.split("\n"), comms
        # The time-to-serve ledger from vLLM's own start-up lines (the profile's patterns: "Loading weights took",
        # uvicorn's "Application startup complete"): its phases add up to the wall time, and the named ones explain
        # it. No graph is compiled (--enforce-eager), so that phase is absent.
        ledger = doc["time_to_serve"]
        assert abs(sum(ledger["phases"].values()) - wall) <= 0.05 * wall, (ledger, wall)
        assert ledger["phases"]["other"] <= 0.05 * wall, ledger
        for name in (f"{NAME}-mixed-0", f"{NAME}-mixed-1"):
            server = ledger["instances"][name]
            assert server["source"] == "server log", server
            assert {"weights_loaded_s", "server_ready_s"} <= set(server), server
        before = container_ids(bed, HOST, NAME)

        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0 and doc["changed"] is False
        assert container_ids(bed, HOST, NAME) == before

        code, doc = deployctl.json("status", path)
        assert code == 0 and [i["healthy"] for i in doc["instances"]] == [True, True]
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}
