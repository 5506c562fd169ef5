"""Golden files: each mapped playbook x target x NPU stack (golden/<stack>/<target>/<spec>.yaml), byte for byte. Regenerate after a reviewed change with
DEPLOYCTL_REGEN_GOLDEN=1 python -m pytest tests/export/test_golden.py (then read the diff)."""

from __future__ import annotations

import os

import pytest

from deployctl.export.render import stream
from tests.export.cases import MAPPED, REFUSED, ROOT, exported, golden_path, mapped_cases, stacked_cases

TARGETS = ("k8s", "lws", "kthena")


@pytest.mark.parametrize("spec,target,stack", stacked_cases())
def test_export_matches_its_golden_file(spec, target, stack):
    text = stream(exported(spec, target, stack))
    path = golden_path(spec, target, stack)
    if os.environ.get("DEPLOYCTL_REGEN_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("spec,target", mapped_cases()[:3])
def test_the_same_spec_gives_the_same_bytes(spec, target):
    assert stream(exported(spec, target)) == stream(exported(spec, target))


@pytest.mark.parametrize("playbook", sorted(p.name for p in (ROOT / "playbooks").glob("*.yaml")))
def test_every_playbook_and_target_is_either_mapped_or_refused(playbook):
    spec = f"playbooks/{playbook}"
    for target in TARGETS:
        mapped = target in MAPPED.get(spec, ((), ()))[1]
        assert mapped != ((spec, target) in REFUSED), f"{spec} --to {target}: pin it in tests/export/cases.py"


def test_no_golden_file_is_left_over():
    expected = {golden_path(*case) for case in stacked_cases()}
    assert len(expected) > len(mapped_cases())  # a golden per stack, not only the default's
    assert set(golden_path("x", "k8s").parents[2].rglob("*.yaml")) == expected
