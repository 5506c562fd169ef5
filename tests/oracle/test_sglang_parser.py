"""SGLang's own parser judges what deployctl renders for server sglang (issue 43): every `python -m
sglang.launch_server` argv of every playbook and test spec that runs SGLang.

SGLang is not a dependency of deployctl: the check runs in an interpreter that has it, `DEPLOYCTL_SGLANG_PYTHON` or
this one when it can import sglang, and is skipped with that reason otherwise. Its full install is ~6 GB (CUDA torch
and more); what importing sglang.srt.server_args needs is ~2 GB, as .ci/run installs it (`-m sglang_oracle`):

    python3 -m venv /tmp/sglang
    /tmp/sglang/bin/pip install --no-deps sglang==0.5.23 torch==2.13.0+cpu triton==3.8.0
    /tmp/sglang/bin/pip install msgspec numpy orjson psutil pybase64 requests packaging pillow starlette pydantic \\
        pyzmq tqdm IPython aiohttp filelock typing_extensions sympy networkx jinja2 fsspec
    DEPLOYCTL_SGLANG_PYTHON=/tmp/sglang/bin/python python -m pytest -m sglang_oracle

The checker itself is tests/oracle/sglang_check.py (standard library and SGLang only)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployctl.plan.containers import container_for
from deployctl.servers.sglang import LAUNCH_SERVER
from deployctl.spec.load import load_spec, load_spec_text
from tests.export.cases import ENVIRON

pytestmark = pytest.mark.sglang_oracle

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("sglang_check.py")
SPEC_FILES = sorted([*ROOT.glob("playbooks/*.yaml"), *ROOT.glob("tests/fixtures/specs/examples/*.yaml"),
                     *ROOT.glob("tests/fixtures/export/specs/*.yaml")])


def _oracle_python() -> str | None:
    configured = os.environ.get("DEPLOYCTL_SGLANG_PYTHON")
    if configured:
        return configured
    return sys.executable if importlib.util.find_spec("sglang") is not None else None


def _specs():
    """(name, Spec) for every spec file and the test specs of tests/servers/sglang/."""
    from tests.servers.sglang.test_flavour import TEST_SPECS

    for path in SPEC_FILES:
        yield str(path.relative_to(ROOT)), load_spec(path, environ=ENVIRON)
    for name, text in TEST_SPECS.items():
        yield f"tests/servers/sglang/test_flavour.py {name}", load_spec_text(text)


def _launch_args(argv: tuple[str, ...]) -> list[str] | None:
    """The words after `python -m sglang.launch_server`, or None for another command."""
    words = list(argv)
    n = len(LAUNCH_SERVER)
    return words[n:] if tuple(words[:n]) == LAUNCH_SERVER else None


def rendered() -> list[dict]:
    commands = []
    for name, spec in _specs():
        if spec.server != "sglang":
            continue
        for instance in spec.instances:
            if instance is spec.front:  # sglang-router: tests/oracle/test_router_parser.py
                continue
            argv = _launch_args(container_for(spec, instance).command)
            assert argv is not None, f"{name} {instance.name}: not a launch_server command"
            commands.append({"name": f"{name} {instance.name}", "argv": argv})
    return commands


def _judge(python: str, items: list[dict]) -> list[dict]:
    done = subprocess.run([python, str(CHECKER)], input=json.dumps(items), capture_output=True, text=True,
                          timeout=600, cwd="/")
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout)
    assert len(results) == len(items)
    return results


def test_what_the_oracle_is_fed_covers_the_playbook_and_the_test_specs():
    """Runs without SGLang: the collection itself, so the oracle can never silently judge nothing."""
    commands = rendered()
    names = " ".join(c["name"] for c in commands)
    assert "playbooks/sglang-gpu-mixed.yaml" in names
    assert "test_flavour.py" in names
    assert any("--quantization" in c["argv"] for c in commands)
    assert any("--enable-metrics" in c["argv"] for c in commands)


def test_sglangs_own_parser_accepts_every_rendered_argv_as_meant():
    python = _oracle_python()
    if python is None:
        pytest.skip("SGLang is not installed here: set DEPLOYCTL_SGLANG_PYTHON to an interpreter that has "
                    "sglang==0.5.23 (see this module's docstring)")
    items = rendered()
    failed = {r["name"]: r["problems"] for r in _judge(python, items) if not r["ok"]}
    assert not failed, json.dumps(failed, indent=1)


def test_the_oracle_refuses_what_sglang_refuses():
    """The checker is not a rubber stamp: a misspelt flag, an unparsable number and a method SGLang lacks fail."""
    python = _oracle_python()
    if python is None:
        pytest.skip("SGLang is not installed here (see this module's docstring)")
    bad = [
        {"name": "misspelt", "argv": ["--model-path", "/m", "--tp-sise", "2"]},
        {"name": "number", "argv": ["--model-path", "/m", "--max-running-requests", "lots"]},
        {"name": "choice", "argv": ["--model-path", "/m", "--quantization", "smoothquant"]},
        {"name": "vllm", "argv": ["--model-path", "/m", "--gpu-memory-utilization", "0.9"]},
    ]
    assert [r["ok"] for r in _judge(python, bad)] == [False, False, False, False]
