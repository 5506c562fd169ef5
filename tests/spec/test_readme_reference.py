"""README's "Spec reference" names every key the schema knows."""

from __future__ import annotations

from pathlib import Path

from deployctl.spec.schema import load_schema

README = Path(__file__).resolve().parents[2] / "README.md"


def _property_names(node) -> set[str]:
    names: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties":
                names |= set(value)
            names |= _property_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= _property_names(value)
    return names


def test_spec_reference_names_every_schema_key():
    text = README.read_text(encoding="utf-8")
    assert "## Spec reference" in text
    reference = text.split("## Spec reference", 1)[1].split("\n## ", 1)[0]
    names = _property_names(load_schema())
    assert set(load_schema()["properties"]) <= names and len(names) >= 40
    missing = sorted(name for name in names if f"`{name}`" not in reference)
    assert missing == []
