"""What a flavour cannot do is a map of feature -> reason (servers/features.py) that validate, plan and export read:
a key that asks for one is refused at its path and line with the flavour's reason, never skipped in silence."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from deployctl.export.options import ExportOptions
from deployctl.export.refusals import problems
from deployctl.servers import FLAVOURS
from deployctl.servers.base import Flavour
from deployctl.servers.features import ASKED_AT, Feature
from deployctl.spec.load import check_spec_text, load_spec_text

BASE = {
    ("ascend", "vllm"): "image: {name: 'deployctl/standin-vllm:latest'}\n",
    ("gpu", "vllm"): "platform: gpu\nimage: {name: 'vllm/vllm-openai:v0.18.0'}\n",
    ("gpu", "triton"): "platform: gpu\nserver: triton\nimage: {name: 'nvcr.io/nvidia/tritonserver:25.09-vllm-python-py3'}\n",
    ("ascend", "vllm-ascend"): "server: vllm-ascend\nimage: {name: 'quay.io/ascend/vllm-ascend:v0.13.0rc1'}\n",
    ("gpu", "sglang"): "platform: gpu\nserver: sglang\nimage: {name: 'lmsysorg/sglang:v0.5.23'}\n",
    ("ascend", "sglang"): "server: sglang\nimage: {name: 'lmsysorg/sglang:v0.5.23-cann8.5.0-a3'}\n",
}
MIXED = """topology:
  mode: mixed
  instances:
    - {host: h1, devices: [0], port: 9001}
    - {host: h1, devices: [1], port: 9011}
"""
VA_MIXED = """topology:
  mode: mixed
  groups: [{hosts: [h1], dp: 2, tp: 1, port: 9100, devices: [0, 1]}]
"""
ROUTER = "  front: {kind: vllm-router, host: h1, port: 8000, image: 'vllm-router:0.1.17'}\n"
# server sglang is fronted by its own router (servers/sglang FRONT_KINDS)
SGLANG_ROUTER = "  front: {kind: sglang-router, host: h1, port: 8000, image: 'sglang-router:0.3.2'}\n"
# each feature, as a spec asks for it (appended to the spec; the front goes inside topology)
ASKING = {
    Feature.OPENAI_API: "",
    Feature.COMPILE_CACHE: "cache: {compile: true}\n",
    Feature.VERSION_PROFILES: "server_version: '0.13'\n",
    Feature.SURGE: "rollout: {strategy: drain, max_surge: 1}\n",
    Feature.FRONT: "",  # the router, in topology
    Feature.DISAGGREGATED: "",  # mode: disaggregated, in topology
}


def fronted(flavour: Flavour) -> bool:
    """Whether the flavour's base spec here has a router in front."""
    return flavour.supports(Feature.OPENAI_API) and flavour.supports(Feature.FRONT)


def spec_text(key: tuple[str, str], extra: str = "", front: bool = True) -> str:
    topology = VA_MIXED if key[1] == "vllm-ascend" else MIXED
    return ("version: 1\nname: feat\nhosts:\n  h1: {address: 10.200.0.11}\n" + BASE[key]
            + "weights: {dest: /srv/models/tiny}\nmodel: {served_name: tiny}\n" + topology
            + ((SGLANG_ROUTER if key[1] == "sglang" else ROUTER) if front else "") + extra)


def test_every_flavour_spec_here_is_valid_when_it_asks_for_nothing_it_cannot_do():
    for key, flavour in FLAVOURS.items():
        _, errors, _ = check_spec_text(spec_text(key, front=fronted(flavour)), "s.yaml")
        assert errors == [], (key, [p.render() for p in errors])


CASES = [(key, feature) for key, flavour in FLAVOURS.items() for feature in flavour.unsupported
         if feature in ASKED_AT]


@pytest.mark.parametrize("key,feature", CASES, ids=[f"{k[0]}-{k[1]}-{f.name}" for k, f in CASES])
def test_each_unsupported_feature_a_spec_asks_for_is_a_validate_error_with_its_reason_path_and_line(key, feature):
    flavour = FLAVOURS[key]
    text = spec_text(key, ASKING[feature], front=feature in (Feature.OPENAI_API, Feature.FRONT) or fronted(flavour))
    if feature is Feature.DISAGGREGATED:
        text = text.replace("mode: mixed", "mode: disaggregated")
    _, errors, _ = check_spec_text(text, "s.yaml")
    path = ASKED_AT[feature][0]
    line = 1 + next(i for i, row in enumerate(text.splitlines()) if row.lstrip().startswith(f"{path[-1]}:")
                    or f"{path[-1]}:" in row and row.startswith(path[0]))
    found = [p for p in errors if p.path == path]
    assert [(p.message, p.line, p.file) for p in found] == [(flavour.unsupported[feature], line, "s.yaml")], \
        [p.render() for p in errors]


def test_gpu_surge_behind_a_router_is_refused_naming_the_key_and_why():
    """It validated with no word and planned no surge: spare cards are probed on Ascend hosts only."""
    text = spec_text(("gpu", "vllm"), "rollout:\n  strategy: drain\n  max_surge: 1\n")
    _, errors, _ = check_spec_text(text, "s.yaml")
    assert [p.render() for p in errors] == [
        f"s.yaml:{len(text.splitlines())}:14: rollout.max_surge: {FLAVOURS[('gpu', 'vllm')].unsupported[Feature.SURGE]}"]
    assert "spare cards on Ascend hosts only" in errors[0].message
    _, errors, _ = check_spec_text(spec_text(("ascend", "vllm"), "rollout: {strategy: drain, max_surge: 1}\n"),
                                   "s.yaml")
    assert errors == []  # Ascend hosts' spare cards are probed: surge is theirs


def test_export_refuses_what_the_flavour_cannot_do_with_the_same_reason():
    spec = load_spec_text(spec_text(("gpu", "vllm"), front=False))
    asked = dataclasses.replace(spec, rollout=dataclasses.replace(spec.rollout, max_surge=1))
    found = problems(asked, ExportOptions(target="k8s", weights_pvc="models"))
    reason = FLAVOURS[("gpu", "vllm")].unsupported[Feature.SURGE]
    assert [(p.path, p.message) for p in found] == [(("rollout", "max_surge"), reason)]


def test_export_on_the_command_line_refuses_it_at_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(spec_text(("gpu", "vllm"), "rollout: {strategy: drain, max_surge: 1}\n"))
    done = subprocess.run([sys.executable, "-m", "deployctl", "export", str(path), "--to", "k8s",
                           "--weights-pvc", "models"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 2 and "rollout.max_surge" in done.stderr
    assert "spare cards on Ascend hosts only" in done.stderr.replace("\n", " ")


def test_what_no_key_asks_for_is_said_in_validates_summary(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(spec_text(("gpu", "triton"), front=False))
    done = subprocess.run([sys.executable, "-m", "deployctl", "validate", str(path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    reason = FLAVOURS[("gpu", "triton")].unsupported[Feature.ONE_TOKEN_LIVENESS]
    assert done.returncode == 0, done.stderr
    assert f"not supported by Triton's vLLM backend: one-token liveness: {reason}" in done.stdout.replace("\n", " ")


def test_no_capability_boolean_is_left_beside_the_map():
    gone = ("openai_api", "one_token_liveness", "has_compile_cache", "has_profiles")
    assert [name for name in gone if hasattr(Flavour, name) or any(hasattr(f, name) for f in FLAVOURS.values())] == []
    assert all(isinstance(reason, str) and reason for f in FLAVOURS.values() for reason in f.unsupported.values())
