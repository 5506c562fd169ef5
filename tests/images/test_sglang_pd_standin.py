"""The SGLang stand-in's P/D (images/standin/standin/sglang_pd.py), started with the argv deployctl renders for a
prefill and a decode on loopback: what SGLang refuses, its bootstrap server, its metrics' engine_type, and the
answer check's host program asking a pair as sglang-router does (deployctl/execute/ask_answers.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from deployctl.execute.answers import ask_program
from deployctl.plan.answers import answer_paths
from deployctl.plan.containers import container_for
from deployctl.spec.load import load_spec_text
from tests.images.test_sglang_standin import start
from tests.images.test_triton_standin import request, wait_listening
from tests.ports import free_ports
from tests.servers.sglang.test_flavour import BASE, TEST_SPECS

NO_ROOM = "Invalid request: Disaggregated request received without bootstrap room id."


def pd_spec(prefill: int, decode: int, mixed: int):
    text = (TEST_SPECS["PD"].replace("{address: 10.200.0.11}", "{address: 127.0.0.1}")
            .replace("port: 30000}", f"port: {prefill}}}")
            .replace("    - {host: tb1, devices: [1], port: 30010, bootstrap_port: 8998}\n", "")
            .replace("port: 30020}", f"port: {decode}}}").replace("connector: nixl", "connector: mooncake"))
    mixed_text = BASE.replace("port: 30000}", f"port: {mixed}}}")
    return load_spec_text(text, environ={}), load_spec_text(mixed_text, environ={})


@pytest.fixture(scope="module")
def servers():
    prefill_port, decode_port, mixed_port = free_ports(3)
    spec, mixed = pd_spec(prefill_port, decode_port, mixed_port)
    procs = []
    try:
        for s, instance in [(spec, i) for i in spec.instances if i is not spec.front] + [(mixed, mixed.instances[0])]:
            words = list(container_for(s, instance).command)[2:]
            words[words.index("--host") + 1] = "127.0.0.1"  # loopback only in tests
            procs.append(start(words))
            wait_listening(procs[-1], instance.port)
        yield spec, prefill_port, decode_port, mixed_port
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_pd_servers_refuse_a_request_without_a_room_and_say_their_role(servers):
    spec, prefill, decode, _ = servers
    bootstrap = spec.instances[0].bootstrap_port
    for port in (prefill, decode):
        status, body = request(port, "POST", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2})
        doc = json.loads(body)
        assert status == 400 and doc["object"] == "error" and doc["code"] == 400 and doc["message"].startswith(NO_ROOM)
        assert request(port, "GET", "/health_generate") == (200, b"")
    assert request(bootstrap, "GET", "/health") == (200, b"OK")  # the prefill's bootstrap server
    for port, role in ((prefill, "prefill"), (decode, "decode")):
        assert f'engine_type="{role}"' in request(port, "GET", "/metrics")[1].decode()


def ask(paths) -> dict:
    request_doc = {"timeout": 30, "paths": [p.to_json() for p in paths]}
    done = subprocess.run([sys.executable, "-c", ask_program()], input=json.dumps(request_doc), text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {doc["name"]: doc for doc in map(json.loads, done.stdout.splitlines())}


def test_a_pair_asked_as_the_router_asks_answers_what_a_mixed_server_answers(servers):
    spec, _, _, mixed_port = servers
    pair, _router = answer_paths(spec, "tb1", {"tb1": "127.0.0.1"}, 8)
    wrong = type(pair)(name="no prefill there", url=pair.url, body=pair.body, prefill_url=pair.prefill_url,
                       bootstrap="127.0.0.1:" + str(free_ports(1)[0]))
    mine = type(pair)(name="mixed", url=f"http://127.0.0.1:{mixed_port}/v1/completions", body=pair.body)
    answers = ask((pair, wrong, mine))
    assert answers[pair.name]["status"] == 200 and answers[pair.name]["text"] == answers["mixed"]["text"], answers
    assert answers[pair.name]["text"].count(" ") == 8
    # a decode that cannot reach its prefill's bootstrap server fails the request, and the check names it
    assert answers["no prefill there"]["status"] == 500
    assert "Failed to get prefill server info from bootstrap server" in answers["no prefill there"]["error"]


def test_a_mode_or_backend_sglang_does_not_know_is_its_parsers_exit_2():
    words = ["sglang.launch_server", "--model-path", "/m", "--disaggregation-mode", "both"]
    proc = start(words)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "argument --disaggregation-mode: invalid choice: 'both' (choose from 'null', 'prefill', 'decode')" in out
