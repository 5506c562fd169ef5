"""Every spec under tests/fixtures/specs/{invalid,many,warnings} yields exactly the problems its comments name."""

from __future__ import annotations

import pytest

from tests.spec.corpus import SPECS, check_file, expectations, unmatched

CORPUS = [path for folder in ("invalid", "many", "warnings") for path in sorted((SPECS / folder).glob("*.yaml"))]


def test_the_corpus_is_large_enough():
    assert len(list((SPECS / "invalid").glob("*.yaml"))) >= 40
    assert len(list((SPECS / "many").glob("*.yaml"))) >= 3


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_spec_reports_exactly_its_expected_problems(path):
    text = path.read_text(encoding="utf-8")
    expected = expectations(text)
    assert expected, f"{path.name} has no '# expect:' line"
    errors, warnings = check_file(path)
    missing, extra = unmatched([e for e in expected if e.severity == "expect"], errors)
    assert not missing and not extra, (
        f"\nmissing: {missing}\nunexpected: {[p.render() for p in extra]}\nall: {[p.render() for p in errors]}")
    missing, extra = unmatched([e for e in expected if e.severity == "warn"], warnings)
    assert not missing and not extra, (f"\nmissing warnings: {missing}\nunexpected: {[p.render() for p in extra]}")


@pytest.mark.parametrize("path", sorted((SPECS / "invalid").glob("*.yaml")), ids=lambda p: p.stem)
def test_single_defect_specs_render_with_file_line_and_column(path):
    errors, _ = check_file(path)
    for problem in errors:
        assert problem.render().startswith(f"{path.name}:{problem.line}:{problem.column}: ")
        assert problem.line >= 1 and problem.column >= 1
