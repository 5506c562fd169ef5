"""`deployctl watch` against the real vLLM engine: a real hang (the engine core process SIGSTOPped inside its
container: vLLM's /health still answers 200, since it only asks whether the core has died) is found and the server
restarted within two probes; a saturated engine (a queue longer than it runs, for 60 s) is busy, never restarted."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from tests.e2e.conftest import container_ids
from tests.e2e.test_watch import watch_once
from tests.real_engine.conftest import HOST, real_spec

pytestmark = pytest.mark.real_engine

NAME = "re-watch"
PORT = 8620
SERVER = f"{NAME}-mixed-0"
SATURATE_S = 60


def started_at(bed) -> str:
    return bed.docker_on(HOST, "inspect", "-f", "{{.State.StartedAt}}", SERVER).stdout.strip()


class Saturating:
    """`clients` threads, each sending one long streamed completion after another to the engine until stopped:
    more requests than its max_num_seqs, so some always wait."""

    def __init__(self, clients: int) -> None:
        self.stop = threading.Event()
        self.answered, self.errors = 0, []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _client(self) -> None:
        body = json.dumps({"model": "tiny", "prompt": "hello " * 16, "max_tokens": 200, "temperature": 0,
                           "ignore_eos": True})
        while not self.stop.is_set():
            connection = http.client.HTTPConnection("10.200.0.11", PORT, timeout=120)
            try:
                connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                if response.status == 200:
                    self.answered += 1
                else:
                    self.errors.append(response.status)
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(repr(error))
            finally:
                connection.close()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(150)


def stop_engine_core(bed, container: str = SERVER, sig: str = "STOP") -> str:
    """SIGSTOP (or `sig`: CONT resumes it) the container's VLLM::EngineCore process (vllm/v1/engine/core.py names
    it with setproctitle); its pids."""
    script = ('for p in /proc/[0-9]*; do if [ "$(cat $p/comm 2>/dev/null)" = "VLLM::EngineCor" ]; then '
              f'kill -{sig} "${{p#/proc/}}" && echo "${{p#/proc/}}"; fi; done')
    return bed.docker_on(HOST, "exec", container, "sh", "-c", script).stdout.strip()


def test_watch_restarts_a_real_hang_within_two_probes_and_nothing_under_saturation(real_bed, deployctl):
    bed = real_bed
    path = deployctl.write(real_spec(bed, NAME, (PORT,), max_num_seqs=2), name=f"{NAME}.yaml")
    try:
        code, doc = deployctl.json("up", path, "--yes")
        assert code == 0, deployctl.failed
        assert [line["verdict"] for line in watch_once(deployctl, path)] == ["idle"]
        first = started_at(bed)

        # Saturation: 6 clients on 2 sequences for a minute; every probe sees tokens advance: busy or idle.
        load = Saturating(6)
        verdicts, began = [], time.monotonic()
        try:
            while time.monotonic() - began < SATURATE_S:
                # the bed's hosts share this machine's 2 cores with the saturated engine: a slow SSH banner here
                # is the machine's, not the host's, so the probe waits longer for it than a user's default
                lines = watch_once(deployctl, path, "--connect-timeout", "60")
                assert not [line for line in lines if line["type"] == "action"], lines
                verdicts += [(line["verdict"], line["reason"]) for line in lines]
        finally:
            load.join()
        assert load.answered > 0 and not load.errors, (load.answered, load.errors)
        assert "busy" in [v for v, _ in verdicts], verdicts
        assert not [v for v in verdicts if v[0] not in ("busy", "idle")], verdicts
        assert started_at(bed) == first

        # A real hang: /health stays 200, the one-token generate never answers, no token is generated.
        assert stop_engine_core(bed), "no VLLM::EngineCore process in the container"
        actions, probes = [], 0
        while not actions and probes < 2:
            lines = watch_once(deployctl, path)
            probes += 1
            actions = [line for line in lines if line["type"] == "action"]
        assert [(a["containers"], a["result"]) for a in actions] == [([SERVER], "restarting"), ([SERVER], "ok")], \
            (probes, lines)
        assert started_at(bed) != first
        assert [line["verdict"] for line in watch_once(deployctl, path)] == ["idle"]
    finally:
        code, out, err = deployctl("down", path, "--yes")
        assert code == 0, err
        assert container_ids(bed, HOST, NAME) == {}
