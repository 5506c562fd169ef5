"""The flavours are the one place that knows which server a spec runs: nothing outside deployctl/servers/ compares
`server` with a server's name (add a Flavour attribute or hook instead)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import deployctl
from deployctl.servers import FLAVOURS, flavour_for, flavour_named

PACKAGE = Path(deployctl.__file__).parent
COMPARISON = re.compile(r"server ==|server !=|\.server in|server in \(|== \"triton\"|== \"vllm-ascend\"")


def test_no_server_comparison_outside_the_flavours():
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if "servers" not in path.relative_to(PACKAGE).parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if COMPARISON.search(line)]
    assert found == []


def test_the_registry_is_keyed_by_platform_and_server():
    assert set(FLAVOURS) == {("ascend", "vllm"), ("ascend", "vllm-ascend"), ("gpu", "vllm"), ("gpu", "triton"),
                             ("gpu", "sglang")}
    assert flavour_for("ascend", "triton") is None
    assert flavour_for("ascend", "sglang") is None
    # a spec on the wrong platform is still checked by its server's rules (validate names the platform)
    assert flavour_named("ascend", "triton").server == "triton"
    assert flavour_named("gpu", "vllm-ascend").server == "vllm-ascend"


def test_each_flavour_answers_health_and_answer_paths():
    from deployctl.spec.model import Instance, ModelArgs, Spec

    spec = Spec(version=1, name="d", hosts=(), model=ModelArgs(served_name="m"), mode="mixed", instances=())
    proxy = Instance(role="proxy", index=0, host="h", devices=(), port=8000, name="d-proxy", tp=0)
    assert {k: f.health_path() for k, f in FLAVOURS.items()} == {
        ("ascend", "vllm"): "/health", ("ascend", "vllm-ascend"): "/health", ("gpu", "vllm"): "/health",
        ("gpu", "triton"): "/v2/health/ready", ("gpu", "sglang"): "/health"}
    assert FLAVOURS[("ascend", "vllm-ascend")].health_path(proxy) == "/healthcheck"
    assert FLAVOURS[("gpu", "triton")].answers_path(spec) == "/v2/models/m/generate"
    assert FLAVOURS[("ascend", "vllm")].answers_path(spec) == "/v1/completions"


def test_servers_import_plan_only_inside_functions():
    """spec/ asks the flavours for its rules, and plan/ imports them: at import time servers/ sits below both."""
    for path in sorted((PACKAGE / "servers").glob("*.py")):
        tree = ast.parse(path.read_text())
        top = {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        assert sorted(m for m in top if m.startswith("deployctl.plan")) == [], path.name
