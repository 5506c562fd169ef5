"""vLLM's own parser judges what deployctl renders (issue 29): every `vllm serve` argv of every playbook and test
spec that runs upstream vLLM (vllm-ascend, vLLM on GPU) and every Triton vLLM backend's engine arguments; then
(issue 41) vLLM's engine config for each, built as `vllm serve` builds it on start, on the CPU platform with stub
models (tests/oracle/models.py: config.json only), which is where vLLM refuses what the parser lets through (a dense
model with external data parallel).

vLLM is not a dependency of deployctl (about 9.4 GB with torch): the check runs in an interpreter that has it,
`DEPLOYCTL_VLLM_PYTHON` or this one when it can import vllm, and is skipped with that reason otherwise.
`.ci/run` installs vLLM into a venv of its own and runs this module (`-m vllm_oracle`); on a developer's machine:
`python3 -m venv /tmp/vllm && /tmp/vllm/bin/pip install vllm==0.33.0` then
`DEPLOYCTL_VLLM_PYTHON=/tmp/vllm/bin/python python -m pytest -m vllm_oracle`. The checker itself is
tests/oracle/vllm_check.py (standard library and vLLM only)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.plan.containers import container_for
from deployctl.servers.vllm_ascend.upstream import HostNetwork
from deployctl.spec.load import check_spec_text, load_spec, load_spec_text
from tests.export.cases import ENVIRON
from tests.oracle.models import MODEL_CONFIGS, QWEN3_32B, QWEN3_235B_A22B

pytestmark = pytest.mark.vllm_oracle

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("vllm_check.py")
# every rendered line builds its engine config today (42); a line that stops carrying its models would be skipped
# by the checker, so fewer built than this fails
ENGINE_CONFIGS_BUILT_AT_LEAST = 42
SPEC_FILES = sorted([*ROOT.glob("playbooks/*.yaml"), *ROOT.glob("tests/fixtures/specs/examples/*.yaml"),
                     *ROOT.glob("tests/fixtures/export/specs/*.yaml")])


def _oracle_python() -> str | None:
    configured = os.environ.get("DEPLOYCTL_VLLM_PYTHON")
    if configured:
        return configured
    return sys.executable if importlib.util.find_spec("vllm") is not None else None


def _specs():
    """(name, Spec) for every spec file and the test specs of the vllm-ascend shapes."""
    from tests.spec.test_upstream_build import EAGLE3, QWEN3

    for path in SPEC_FILES:
        yield str(path.relative_to(ROOT)), load_spec(path, environ=ENVIRON)
    for launch in ("external", "internal"):
        yield f"tests/spec/test_upstream_build.py QWEN3 ({launch})", load_spec_text(QWEN3 % launch)
    yield "tests/spec/test_upstream_build.py EAGLE3", load_spec_text(EAGLE3)  # a drafter with its model


def _networks(spec) -> dict[str, HostNetwork]:
    # what `up` reads on each host, written down: the parser does not care which address or NIC it is
    cards = spec.requirements.cards if spec.requirements else 8
    return {h.name: HostNetwork(address=f"10.0.0.{10 + i}", interface="eth0", npus=cards)
            for i, h in enumerate(spec.hosts)}


def _vllm_serve(argv: tuple[str, ...]) -> list[str] | None:
    """The `vllm serve ...` words of a container's command (after any launcher), or the deprecated
    `python -m vllm.entrypoints.openai.api_server ARGS` as the `vllm serve ARGS` it stands for."""
    words = list(argv)
    for i in range(len(words) - 1):
        if words[i] == "vllm" and words[i + 1] == "serve":
            return words[i:]
        if words[i] == "-m" and words[i + 1] == "vllm.entrypoints.openai.api_server":
            return ["vllm", "serve", *words[i + 2:]]
    return None


def model_paths(words) -> list[str]:
    """The models a line (or an engine-args document's values) names: the served model and a drafter's `model`."""
    paths = []
    for word in words:
        if isinstance(word, str) and word.startswith("{"):
            model = json.loads(word).get("model")
            paths += [model] if isinstance(model, str) else []
        elif isinstance(word, str) and word.startswith("/mnt/weights/"):
            paths.append(word)
    return sorted(set(paths))


def stub_models(words) -> dict[str, dict]:
    """{path: config.json} for each model a line names; a model tests/oracle/models.py lacks fails here."""
    missing = [p for p in model_paths(words) if p not in MODEL_CONFIGS]
    assert not missing, f"add the config.json of {missing} to tests/oracle/models.py"
    return {p: MODEL_CONFIGS[p] for p in model_paths(words)}


def run_checker(python: str, items: list[dict]) -> list[dict]:
    done = subprocess.run([python, str(CHECKER)], input=json.dumps(items), capture_output=True, text=True,
                          timeout=1200, cwd="/")
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout)
    assert [r["name"] for r in results] == [i["name"] for i in items]
    return results


def rendered() -> tuple[list[dict], list[dict]]:
    """Every `vllm serve` argv and every Triton engine-args document deployctl renders for the specs."""
    from deployctl.servers.triton.repository import engine_args

    commands, engines = [], []
    for name, spec in _specs():
        upstream_vllm = spec.upstream is not None or spec.platform == "gpu"
        if not upstream_vllm:
            continue  # the AscendCloud image runs Huawei's own vLLM fork, not upstream vLLM's parser
        networks = _networks(spec) if spec.upstream is not None else None
        for instance in spec.instances:
            if spec.server == "triton":
                engines.append({"name": f"{name} {instance.name}", "engine_args": engine_args(spec, instance)})
                continue
            argv = _vllm_serve(container_for(spec, instance, None, networks).command)
            if argv is not None:
                commands.append({"name": f"{name} {instance.name}", "argv": argv})
    return commands, engines


def test_what_the_oracle_is_fed_covers_every_flavour_it_can_judge():
    """Runs without vLLM: the collection itself, so the oracle can never silently judge nothing."""
    commands, engines = rendered()
    names = " ".join(c["name"] for c in commands)
    assert len(commands) >= 20
    for playbook in ("vllm-ascend-pd-qwen3", "vllm-ascend-mixed-ep-1host", "vllm-ascend-mixed-2hosts-internal",
                     "gpu-vllm"):
        assert playbook in names
    assert any("--kv-transfer-config" in c["argv"] for c in commands)
    assert any("--headless" in c["argv"] for c in commands)
    assert any("--shutdown-timeout" in c["argv"] for c in commands)  # vLLM's graceful stop, where it has one
    assert any('"model":"/mnt/weights/Qwen3-235B-A22B/eagle3"' in w for c in commands for w in c["argv"])
    assert engines, "the Triton playbook's engine arguments"
    # each line's models have a stub config.json, a MoE one and a dense one among them
    lines = [stub_models(c["argv"]) for c in commands] + [stub_models(e["engine_args"].values()) for e in engines]
    assert all(lines)
    assert len(commands) + len(engines) >= ENGINE_CONFIGS_BUILT_AT_LEAST
    kinds = {"num_experts" in config or "n_routed_experts" in config for line in lines for config in line.values()}
    assert kinds == {True, False}


def test_vllms_own_parser_accepts_every_rendered_argv_as_meant():
    python = _oracle_python()
    if python is None:
        pytest.skip("vLLM is not installed here: set DEPLOYCTL_VLLM_PYTHON to an interpreter that has "
                    "vllm==0.33.0 (see this module's docstring)")
    commands, engines = rendered()
    items = [{**c, "models": stub_models(c["argv"])} for c in commands] + [
        {"name": e["name"], "engine_args": e["engine_args"], "models": stub_models(e["engine_args"].values())}
        for e in engines]
    results = run_checker(python, items)
    failed = {r["name"]: r["problems"] for r in results if not r["ok"]}
    assert not failed, json.dumps(failed, indent=1)
    built = [r for r in results if r.get("built") is True]
    assert len(built) >= ENGINE_CONFIGS_BUILT_AT_LEAST, f"{len(built)} engine configs built"
    # what was set aside is only what vllm-ascend's plugin registers, and the GPU lines set nothing aside
    assert {reason.split(":")[0] for r in built for reason in r["set_aside"]} <= {
        "--quantization ascend", "--kv-transfer-config MooncakeConnectorV1"}
    assert all(not r["set_aside"] for r in built if "gpu" in r["name"])


def test_the_oracle_refuses_what_vllm_refuses():
    """The checker is not a rubber stamp: a misspelt flag, an unparsable number and a bad connector role fail."""
    python = _oracle_python()
    if python is None:
        pytest.skip("vLLM is not installed here (see this module's docstring)")
    bad = [
        {"name": "misspelt", "argv": ["vllm", "serve", "/m", "--tensor-paralel-size", "2"]},
        {"name": "number", "argv": ["vllm", "serve", "/m", "--max-num-seqs", "lots"]},
        {"name": "role", "argv": ["vllm", "serve", "/m", "--kv-transfer-config",
                                  '{"kv_connector":"MooncakeConnectorV1","kv_role":"kv_sender"}']},
        {"name": "engine", "engine_args": {"model": "/m", "tensor_parallel_sise": 2}},
    ]
    assert [r["ok"] for r in run_checker(python, bad)] == [False, False, False, False]


DENSE = """version: 1
name: pd
server: vllm-ascend
hosts:
  node1: {address: 10.200.0.11}
  node2: {address: 10.200.0.12}
requirements: {cards: 16}
image: {name: "quay.io/ascend/vllm-ascend:TAG"}
weights: {source: SOURCE, dest: /mnt/weights/Qwen3-32B}
model: {served_name: qwen3-32b, max_model_len: 4096}
topology:
  mode: disaggregated
  connector: mooncake
  dp_launch: external
  proxy: {host: node1, port: 8000}
  prefill:
    - {hosts: [node1], dp: 2, tp: 8, port: 9100}
  decode:
    - {hosts: [node2], dp: 4, tp: 4, port: 9100}
"""


def test_vllms_engine_config_and_validate_both_refuse_a_dense_model_with_external_dp(tmp_path):
    """Issue 41 item 1: vLLM's parser takes a dense model's `--data-parallel-rank` lines, its engine config refuses
    them (vllm/engine/arg_utils.py:2456-2465, vLLM 0.33.0); validate refuses the same spec on the profiles of
    vLLM >= 0.23, and both take it for a MoE model. The lines are rendered on the 0.18 profile (whose vLLM starts
    them; validate refuses the spec from 0.23 on, so nothing renders there): the same data-parallel words."""
    python = _oracle_python()
    if python is None:
        pytest.skip("vLLM is not installed here (see this module's docstring)")

    def spec_text(tag, config):
        (tmp_path / "config.json").write_text(json.dumps(config))
        return DENSE.replace("TAG", tag).replace("SOURCE", str(tmp_path))

    for tag in ("v0.23.0-a3", "v0.25.1rc1-a3"):
        _, errors, _ = check_spec_text(spec_text(tag, QWEN3_32B), "pd.yaml")
        assert [p.dotted_path for p in errors] == ["topology.prefill[0].dp", "topology.decode[0].dp"], tag
        assert all("'Non-MoE models do not support external data parallel mode'" in p.message for p in errors)
        _, errors, _ = check_spec_text(spec_text(tag, QWEN3_235B_A22B), "pd.yaml")
        assert errors == [], tag

    spec = load_spec_text(spec_text("v0.18.0", QWEN3_32B), "pd.yaml")
    networks = _networks(spec)
    lines = [(i.name, _vllm_serve(container_for(spec, i, None, networks).command)) for i in spec.instances]
    lines = [(name, argv) for name, argv in lines if argv is not None]
    assert len(lines) == 6 and all("--data-parallel-rank" in argv for _, argv in lines)
    first = [lines[0], lines[-1]]  # a prefill and a decode rank
    items = [{"name": f"{shape} {name}", "argv": argv, "models": {"/mnt/weights/Qwen3-32B": config}}
             for shape, config in (("dense", QWEN3_32B), ("moe", QWEN3_235B_A22B)) for name, argv in first]
    results = run_checker(python, items)
    dense, moe = results[:2], results[2:]
    assert [r["built"] for r in dense] == [False, False]
    assert all(r["problems"][0].startswith("create_engine_config: ValueError: Non-MoE models do not support external "
                                           "data parallel mode") for r in dense), json.dumps(dense, indent=1)
    assert [(r["built"], r["ok"]) for r in moe] == [(True, True), (True, True)], json.dumps(moe, indent=1)
