"""SGLang is one package (issue 43's last line, issue 42's proof): outside servers/sglang/ and fronts/sglang_router.py
only the flavour registry and the schema's values name it, and the tool without those two files' SGLang lines and
without its packages still imports every module, validates every other playbook and exports one."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import deployctl
from tests.servers.test_seam import docstrings

PACKAGE = Path(deployctl.__file__).parent
ROOT = PACKAGE.parent
OWN = ("servers/sglang", "fronts/sglang_router.py")
# What adding SGLang touches in the product beyond its own package (the README and docs/ besides)
TOUCHED = ["servers/registry.py", "spec/schema.json"]


def _naming(path: Path) -> bool:
    """Whether a file names SGLang in what runs or is read: code, strings and data, not comments or docstrings."""
    if path.suffix != ".py":
        return "sglang" in path.read_text(encoding="utf-8").lower()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = docstrings(tree)
    for node in ast.walk(tree):
        text = (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                else node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.module if isinstance(node, ast.ImportFrom) else None)
        if text and "sglang" in text.lower():
            return True
    return False


def files_naming_sglang(package: Path) -> list[str]:
    out = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package).as_posix()
        if (path.is_file() and path.suffix in (".py", ".json", ".yaml") and "__pycache__" not in rel
                and not rel.startswith(OWN) and _naming(path)):
            out.append(rel)
    return out


def test_only_the_registry_and_the_schema_name_sglang_outside_its_package():
    assert files_naming_sglang(PACKAGE) == TOUCHED


def test_the_footprint_sees_code_and_data_but_not_comments(tmp_path):
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "a.py").write_text('"""SGLang\'s P/D."""\n# sglang-router\nx = 1\n')
    (tmp_path / "plan" / "b.py").write_text('if kind == "sglang-router":\n    pass\n')
    (tmp_path / "plan" / "c.py").write_text("from deployctl.servers.sglang import SglangGpu\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.json").write_text('{"id": "sglang_mem_fraction"}')
    assert files_naming_sglang(tmp_path) == ["data/d.json", "plan/b.py", "plan/c.py"]


def _without_sglang(tmp_path: Path) -> Path:
    """A copy of the package with SGLang's packages deleted and its lines taken out of the two files that name it."""
    copy = tmp_path / "deployctl"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(copy / "servers" / "sglang")
    (copy / "fronts" / "sglang_router.py").unlink()
    registry = copy / "servers" / "registry.py"
    text = registry.read_text()
    for line in ("from deployctl.servers.sglang import SglangGpu\n",
                 "from deployctl.servers.sglang.ascend import SglangAscend\n"):
        assert line in text
        text = text.replace(line, "")
    assert "SglangGpu(),\n                                        SglangAscend())" in text
    registry.write_text(text.replace("SglangGpu(),\n                                        SglangAscend())", ")"))
    schema = copy / "spec" / "schema.json"
    text = schema.read_text()
    for value in ('"vllm-ascend",\n        "sglang"', '"ascend",\n            "modelslim"',
                  '"vllm-router",\n            "sglang-router"'):
        assert value in text
        text = text.replace(value, value.split(",")[0])
    schema.write_text(text)
    return tmp_path


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *argv], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_tool_without_sglang_imports_validates_and_exports(tmp_path):
    root = _without_sglang(tmp_path)
    names = [".".join(("deployctl",) + path.relative_to(root / "deployctl").with_suffix("").parts).removesuffix(
        ".__init__") for path in sorted((root / "deployctl").rglob("*.py")) if path.name != "__main__.py"]
    assert "deployctl.servers.registry" in names and not any("sglang" in n for n in names)
    imported = _run(root, "-c", "import importlib, sys, deployctl\n"
                                f"for name in {names!r}:\n    importlib.import_module(name)\n"
                                "assert deployctl.__file__.startswith(sys.argv[1]), deployctl.__file__\n"
                                "from deployctl.servers import FLAVOURS\nfrom deployctl.fronts import FRONTS\n"
                                "print(sorted(f.server for f in FLAVOURS.values()), sorted(FRONTS))", str(root))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split("\n")[0] == ("['triton', 'vllm', 'vllm', 'vllm-ascend'] "
                                              "['proxy', 'scheduler', 'vllm-router']")
    playbooks = sorted(p for p in (ROOT / "playbooks").glob("*.yaml") if "sglang" not in p.name)
    assert len(playbooks) >= 8
    for playbook in playbooks:
        done = _run(root, "-m", "deployctl", "validate", str(playbook))
        assert done.returncode == 0, (playbook.name, done.stdout, done.stderr)
    exported = _run(root, "-m", "deployctl", "export", "--to", "k8s", "--weights-pvc", "models", "--out",
                    str(tmp_path / "k8s"),
                    str(ROOT / "playbooks" / "gpu-vllm.yaml"))
    assert exported.returncode == 0, exported.stderr
    assert list((tmp_path / "k8s").iterdir())
    # a spec that asks for SGLang gets the schema's own refusal, no traceback
    sglang = _run(root, "-m", "deployctl", "validate", str(ROOT / "playbooks" / "sglang-gpu-mixed.yaml"))
    assert sglang.returncode != 0 and "Traceback" not in sglang.stderr and "server" in sglang.stdout + sglang.stderr
