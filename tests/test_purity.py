"""The pure core (spec, facts, plan, ranktable building and checking) imports nothing that touches the world."""

import ast
from pathlib import Path

import pytest

import deployctl

PACKAGE = Path(deployctl.__file__).parent
PURE = ["spec", "facts", "plan", "ranktable", "monitor", "image/plan.py", "image/inputs.py", "image/package.py", "image/layers.py",
        "weights/manifest.py", "weights/source.py", "bench/metrics.py", "bench/stats.py", "bench/slo.py", "bench/search.py", "bench/telemetry.py", "bench/knee.py", "bench/http_parse.py",
        "doctor/report.py", "doctor/targets.py", "doctor/checks.py", "doctor/checks_gpu.py", "doctor/checks_hccl_env.py", "doctor/checks_hccn.py", "doctor/checks_npu.py", "doctor/checks_ports.py", "doctor/checks_profile.py", "doctor/checks_tuning.py",
        "diagnose/plan.py", "diagnose/bundle.py", "diagnose/redact.py",
        "diagnose/signatures.py", "export", "servers", "fronts", "tune"]
FORBIDDEN = ("subprocess", "socket", "paramiko", "boto3", "botocore", "docker", "rich", "requests",
             "deployctl.transport", "deployctl.execute", "deployctl.gather", "deployctl.ui",
             "deployctl.hosts", "deployctl.prepare", "deployctl.fanout", "deployctl.batch", "deployctl.lock")


def pure_modules():
    for entry in PURE:
        path = PACKAGE / entry
        yield from (sorted(path.rglob("*.py")) if path.is_dir() else [path])


@pytest.mark.parametrize("path", list(pure_modules()), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_module_imports_no_io(path):
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    bad = sorted(name for name in imported if any(name == f or name.startswith(f + ".") for f in FORBIDDEN))
    assert bad == [], f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "spec").rglob("*.py")), ids=lambda p: p.name)
def test_spec_imports_nothing_from_plan(path):
    """spec/ is the bottom layer beside core: the plan is built from it, never the other way round."""
    tree = ast.parse(path.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert sorted(n for n in imported if n.startswith("deployctl.plan")) == []


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.rglob("*.py") if "ui" not in p.relative_to(PACKAGE).parts),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_ui_package_imports_rich(path):
    """Every table, colour and progress bar lives in deployctl/ui/: nothing else may import rich."""
    tree = ast.parse(path.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert sorted(n for n in imported if n == "rich" or n.startswith("rich.")) == []
