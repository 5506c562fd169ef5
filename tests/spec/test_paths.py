"""The one normal form of a spec's host paths: comparisons see through `.`, `..` and repeated `/`."""

from __future__ import annotations

import pytest

from deployctl.spec.paths import inside, normal


@pytest.mark.parametrize("path,folded", [("/mnt/w", "/mnt/w"), ("/mnt/w/", "/mnt/w"), ("//mnt//w", "/mnt/w"),
                                         ("/mnt/x/../w/.", "/mnt/w"), ("///", "/"), ("/..", "/")])
def test_normal(path, folded):
    assert normal(path) == folded


@pytest.mark.parametrize("path,parent,expected", [
    ("/mnt/w", "/mnt/w", True), ("/mnt/w/c", "/mnt/w/", True), ("/mnt/x/../w", "/mnt/w", True),
    ("//mnt/w/c", "/mnt/w", True), ("/mnt/wx", "/mnt/w", False), ("/mnt", "/mnt/w", False), ("/x", "/", True),
])
def test_inside(path, parent, expected):
    assert inside(path, parent) is expected
