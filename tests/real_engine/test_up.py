"""`deployctl up` deploying the real vLLM engine (its CPU build, in an image on a bed host) as a user deploys vLLM on
a GPU host, through one deployment's life (one deployment, since each start of the engine costs a minute here):
weights from S3, the health barrier, the smoke request and the all-pairs temperature-0 answer check against vLLM
itself, graphs compiled into the compile cache (the image carries a C++ toolchain for torch inductor); a re-run
that changes nothing; status; `watch` under saturation and on a real hang; `down`, and a second `up` that compiles
no kernel the first one put in the cache; `down`."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.test_watch import watch_once
from tests.real_engine.conftest import HOST, Saturating, real_spec, stop_engine_core

pytestmark = pytest.mark.real_engine

ADDRESS = "10.200.0.11"
PORTS = (8600, 8601)
NAME = "re-up"
SERVERS = (f"{NAME}-mixed-0", f"{NAME}-mixed-1")
HUNG = SERVERS[0]
CACHE = "/srv/cache/re-up"  # /srv is each bed host's own directory
SATURATE_S = 60
# vLLM 0.32 vllm/compilation/decorators.py: after compiling (CPU: CompilationMode.DYNAMO_TRACE_ONCE with inductor,
# vllm/platforms/cpu.py; AOT compile is on with torch >= 2.10, vllm/envs.py use_aot_compile)
SAVED = "saved AOT compiled function to"


def completion(bed, port: int) -> dict:
    body = json.dumps({"model": "tiny", "prompt": "Say hello", "max_tokens": 4, "temperature": 0})
    out = bed.run_on(HOST, ["curl", "--silent", "--max-time", "60", "-H", "Content-Type: application/json",
                            "-d", body, f"http://127.0.0.1:{port}/v1/completions"]).stdout
    return json.loads(out)


def started_at(bed) -> dict:
    """Each server's last start (docker's State.StartedAt)."""
    return {name: bed.docker_on(HOST, "inspect", "-f", "{{.State.StartedAt}}", name).stdout.strip()
            for name in SERVERS}


def logs(bed, name: str) -> str:
    """A server's whole log (vLLM logs to stderr)."""
    found = bed.docker_on(HOST, "logs", name)
    return found.stdout + found.stderr


def kernels(bed) -> list:
    """The compiled kernels (shared objects) in inductor's cache under the host's cache directory."""
    found = bed.run_on(HOST, ["sh", "-c", f"find {CACHE} -path '*inductor_cache*' -name '*.so' | sort"]).stdout
    return found.split()


def test_up_serves_the_real_engine_and_its_life_rerun_status_watch_down_and_a_warm_compile_cache(
        real_bed, deployctl, capsys):
    bed = real_bed
    bed.run_on(HOST, ["rm", "-rf", CACHE])
    text = real_spec(bed, NAME, PORTS, max_num_seqs=2, eager=False, extra=f"cache: {{compile: true, dir: {CACHE}}}\n")
    path = deployctl.write(text, name=f"{NAME}.yaml")
    try:
        began = time.monotonic()
        code, doc = deployctl.json("up", path, "--yes")
        wall = time.monotonic() - began
        assert code == 0 and doc["changed"] is True, deployctl.failed
        assert doc["endpoint"] == f"http://{ADDRESS}:{PORTS[0]}"
        assert set(doc["smoke"]) == set(SERVERS)
        assert [(i["state"], i["healthy"]) for i in doc["instances"]] == [("running", True)] * 2

        # The server is vLLM itself: its fingerprint in every answer, its engine core process in the container
        # (vllm/v1/engine/core.py names it VLLM::EngineCore; a process's comm holds 15 characters).
        for port in PORTS:
            answer = completion(bed, port)
            assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", answer["system_fingerprint"]), answer
            assert answer["usage"]["completion_tokens"] == 4
        for name in SERVERS:
            comms = bed.docker_on(HOST, "exec", name, "sh", "-c", "cat /proc/[0-9]*/comm").stdout
            assert "VLLM::EngineCor" in comms.split("\n"), comms
        # The time-to-serve ledger from vLLM's own start-up lines (the profile's patterns: "Loading weights took",
        # the AOT compile line, uvicorn's "Application startup complete"): its phases add up to the wall time, and
        # the named ones explain it.
        ledger = doc["time_to_serve"]
        assert abs(sum(ledger["phases"].values()) - wall) <= 0.05 * wall, (ledger, wall)
        assert ledger["phases"]["other"] <= 0.05 * wall, ledger
        for name in SERVERS:
            server = ledger["instances"][name]
            assert server["source"] == "server log", server
            assert {"weights_loaded_s", "graph_compiled_s", "server_ready_s"} <= set(server), server
            assert SAVED in logs(bed, name)
        cold = ledger["instances"][SERVERS[0]]
        compiled = kernels(bed)
        assert compiled
        sealed = bed.run_on(HOST, ["sh", "-c", f"cat {CACHE}/*/.deployctl-cache"]).stdout.split()
        assert len(sealed) == 1 and len(sealed[0]) == 64, sealed
        before = container_ids(bed, HOST, NAME)

        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0 and doc["changed"] is False
        assert container_ids(bed, HOST, NAME) == before
        code, doc = deployctl.json("status", path)
        assert code == 0 and [i["healthy"] for i in doc["instances"]] == [True, True]

        # watch. Saturation: 6 clients on 2 sequences of one server for a minute; every probe sees tokens
        # advance: busy or idle, never a restart.
        assert {line["instance"]: line["verdict"] for line in watch_once(deployctl, path)} == \
            {name: "idle" for name in SERVERS}
        first = started_at(bed)
        load = Saturating(6, PORTS[0])
        verdicts, began = [], time.monotonic()
        try:
            while time.monotonic() - began < SATURATE_S:
                # the bed's hosts share this machine's 2 cores with the saturated engine: a slow SSH banner, or a
                # /health answered after 2 s, is the machine's, not the host's, so the probe waits longer for them
                # than a user's default (the health and /metrics reads wait as long as --hang-timeout)
                lines = watch_once(deployctl, path, "--connect-timeout", "60", "--hang-timeout", "10")
                assert not [line for line in lines if line["type"] == "action"], lines
                verdicts += [(line["instance"], line["verdict"], line["reason"]) for line in lines]
        finally:
            load.join()
        assert load.answered > 0 and not load.errors, (load.answered, load.errors)
        assert "busy" in [v for name, v, _ in verdicts if name == HUNG], verdicts
        assert not [v for v in verdicts if v[1] not in ("busy", "idle")], verdicts
        assert started_at(bed) == first

        # A real hang: /health stays 200, the one-token generate never answers, no token is generated. Only the
        # hung server is restarted, within two probes.
        assert stop_engine_core(bed, HUNG), "no VLLM::EngineCore process in the container"
        actions, probes = [], 0
        while not actions and probes < 2:
            lines = watch_once(deployctl, path)
            probes += 1
            actions = [line for line in lines if line["type"] == "action"]
        assert [(a["containers"], a["result"]) for a in actions] == [([HUNG], "restarting"), ([HUNG], "ok")], \
            (probes, lines)
        now = started_at(bed)
        assert now[HUNG] != first[HUNG] and now[SERVERS[1]] == first[SERVERS[1]], (first, now)
        assert {line["instance"]: line["verdict"] for line in watch_once(deployctl, path)} == \
            {name: "idle" for name in SERVERS}

        # down, then up again: inductor finds every kernel in the mounted cache, and the ledger still shows the
        # graph phase from vLLM's own line.
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        assert kernels(bed) == compiled
        warm = doc["time_to_serve"]["instances"][SERVERS[0]]
        assert warm["source"] == "server log" and "graph_compiled_s" in warm, warm
        with capsys.disabled():  # a figure for the record, not an assertion
            print(f"\nreal engine start-up, cold / warm compile cache: {cold} / {warm}")
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}
