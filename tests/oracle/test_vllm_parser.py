"""vLLM's own parser judges what deployctl renders (issue 29): every `vllm serve` argv of every playbook and test
spec that runs upstream vLLM (vllm-ascend, vLLM on GPU) and every Triton vLLM backend's engine arguments.

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
from deployctl.spec.load import load_spec, load_spec_text
from tests.export.cases import ENVIRON

pytestmark = pytest.mark.vllm_oracle

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("vllm_check.py")
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


def test_vllms_own_parser_accepts_every_rendered_argv_as_meant():
    python = _oracle_python()
    if python is None:
        pytest.skip("vLLM is not installed here: set DEPLOYCTL_VLLM_PYTHON to an interpreter that has "
                    "vllm==0.33.0 (see this module's docstring)")
    commands, engines = rendered()
    items = commands + [{"name": e["name"], "engine_args": e["engine_args"]} for e in engines]
    done = subprocess.run([python, str(CHECKER)], input=json.dumps(items), capture_output=True, text=True,
                          timeout=600, cwd="/")
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout)
    assert len(results) == len(items)
    failed = {r["name"]: r["problems"] for r in results if not r["ok"]}
    assert not failed, json.dumps(failed, indent=1)


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
    done = subprocess.run([python, str(CHECKER)], input=json.dumps(bad), capture_output=True, text=True,
                          timeout=600, cwd="/")
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["ok"] for r in json.loads(done.stdout)] == [False, False, False, False]
