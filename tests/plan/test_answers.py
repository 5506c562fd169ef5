"""The all-pairs answer check, pure half: which paths each topology has, how they are addressed from the asking
host, and the verdict on what came back."""

from __future__ import annotations

import json

from deployctl.plan.actions import AnswerCheck
from deployctl.plan.answers import (Answer, AnswerPath, answer_paths, judge_answers, openai_body, parse_answers,
                                    plan_answers)
from deployctl.plan.up import UpInputs, plan_up
from deployctl.spec.load import load_spec_text
from tests.plan.test_containers import PD, spec as pd_spec
from tests.plan.test_image_stage import SPEC as MIXED_SPEC
from tests.plan.test_upstream import facts
from tests.spec.test_upstream_build import QWEN3

QWEN3_ADDRESSES = {"node1": "10.200.0.11", "node2": "10.200.0.12", "node3": "10.200.0.13"}


def test_kv_connector_pd_asks_every_prefill_decode_pair_from_the_proxy_host_then_the_proxy():
    spec = load_spec_text(QWEN3 % "external")
    paths = answer_paths(spec, "node1", QWEN3_ADDRESSES, 4)
    prefills = [i for i in spec.api_servers if i.role == "prefill"]
    decodes = [i for i in spec.api_servers if i.role == "decode"]
    assert (len(prefills), len(decodes)) == (2, 8) and len(paths) == 2 * 8 + 1
    first = paths[0]
    assert first.name == f"{prefills[0].name} -> {decodes[0].name}"
    # the proxy's host asks its own prefill on loopback and the decode hosts by the address HCCL binds
    assert first.prefill_url == f"http://127.0.0.1:{prefills[0].port}/v1/completions"
    assert first.url == f"http://10.200.0.12:{decodes[0].port}/v1/completions"
    assert {p.url for p in paths[:-1]} == {f"http://{QWEN3_ADDRESSES[d.host]}:{d.port}/v1/completions"
                                           for d in decodes}
    assert paths[-1] == AnswerPath("qwen3-proxy", "http://127.0.0.1:8000/v1/completions", openai_body(spec, 4))
    body = json.loads(first.body)
    assert body == {"model": spec.model.served_name, "prompt": body["prompt"], "max_tokens": 4, "temperature": 0,
                    "stream": False}


def test_mixed_asks_each_api_server_and_an_ascendcloud_scheduler_enough_times_to_meet_every_pair():
    mixed = load_spec_text(MIXED_SPEC.replace("WHERE", "once"))
    assert [(p.name, p.url) for p in answer_paths(mixed, "a", {"a": "192.0.2.1", "b": "192.0.2.2", "c": "192.0.2.3"}, 8)] == [
        ("img-mixed-0", "http://127.0.0.1:8000/v1/completions"), ("img-mixed-1", "http://192.0.2.2:8000/v1/completions"),
        ("img-mixed-2", "http://192.0.2.3:8000/v1/completions")]
    two_by_one = pd_spec(PD.replace("  decode:\n", "    - {host: node1, devices: [0, 1], port: 8090}\n  decode:\n"))
    paths = answer_paths(two_by_one, "node1", {"node1": "192.0.2.18"}, 8)
    assert [p.name for p in paths] == ["llama2-13b-pd-scheduler-0 (request 1 of 2)",
                                       "llama2-13b-pd-scheduler-0 (request 2 of 2)"]
    assert all(p.url == "http://127.0.0.1:9000/v1/completions" and not p.prefill_url for p in paths)


def test_the_stage_comes_after_the_front_and_before_verify_and_can_be_left_out():
    spec = load_spec_text(QWEN3 % "external")
    plan = plan_up(spec, facts(spec))
    stage = next(s for s in plan.stages if s.name == "answers")
    (step,) = stage.steps
    (check,) = step.actions
    assert step.host == "node1" and isinstance(check, AnswerCheck) and check.tokens == 8 and len(check.paths) == 17
    assert check.to_json()["type"] == "answers" and len(check.to_json()["paths"]) == 17
    assert "answers" not in [s.name for s in plan_up(spec, facts(spec), UpInputs(answer_tokens=0)).stages]
    assert "answers" not in [s.name for s in plan_up(spec, facts(spec), skip=frozenset({"answers"})).stages]
    assert "contract" not in [s.name for s in plan_up(spec, facts(spec), skip=frozenset({"contract"})).stages]
    assert plan_answers(spec, QWEN3_ADDRESSES, 2).steps[0].actions[0].paths[-1].name == "qwen3-proxy"


PATHS = tuple(AnswerPath(name, f"http://h/{name}", "{}") for name in ("a -> x", "a -> y", "b -> x", "proxy"))


def test_agreeing_paths_pass():
    same = {p.name: Answer(200, 120, " alpha bravo") for p in PATHS}
    assert judge_answers(PATHS, same) == ()


def test_a_path_with_other_tokens_is_named_against_what_most_answered():
    answers = {p.name: Answer(200, 120, " alpha bravo") for p in PATHS}
    answers["b -> x"] = Answer(200, 120, " kilo lima")
    assert judge_answers(PATHS, answers) == (
        "b -> x: answered ' kilo lima' where 3 other path(s) answered ' alpha bravo'",)


def test_empty_200s_errors_and_silence_each_fail_their_path():
    answers = {"a -> x": Answer(200, 0, None), "a -> y": Answer(502, 40, None, "decoder gone"),
               "b -> x": Answer(0, 0, None, "TimeoutError: timed out"), "proxy": Answer(200, 30, "")}
    assert judge_answers(PATHS, answers) == (
        "a -> x: HTTP 200 with no body", "a -> y: HTTP 502 (decoder gone)", "b -> x: no answer (TimeoutError: timed out)",
        "proxy: HTTP 200 without generated text")
    assert judge_answers(PATHS, {}) == tuple(f"{p.name}: no result came back" for p in PATHS)


def test_the_host_programs_lines_parse_and_a_stray_line_is_ignored():
    text = ('{"name": "a -> x", "status": 200, "size": 99, "text": " alpha", "error": ""}\n'
            'Warning: something the host printed\n'
            '{"name": "proxy", "status": 0, "size": 0, "text": null, "error": "URLError: refused"}\n')
    assert parse_answers(text) == {"a -> x": Answer(200, 99, " alpha"), "proxy": Answer(0, 0, None, "URLError: refused")}
