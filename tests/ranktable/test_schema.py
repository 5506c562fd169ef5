"""The schema: one source (ranktables/schema.json), shipped in the package, agreeing with the samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployctl.ranktable.schema import schema_document
from tests.ranktable.samples import CASES, MERGE_INPUTS, document, facts

REPO = Path(__file__).parent.parent.parent


def test_the_packaged_schema_is_the_readable_one():
    source = (REPO / "ranktables" / "schema.json").read_bytes()
    assert (REPO / "deployctl" / "data" / "ranktable.schema.json").read_bytes() == source
    assert schema_document() == json.loads(source)


def _validator():
    from jsonschema import Draft202012Validator

    schema = schema_document()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.mark.parametrize("case", CASES)
def test_the_schema_agrees_with_the_samples_on_structure(case):
    # duplicates are a rule across entries, not structure: the schema alone accepts that file
    structural = facts(case)["valid"] or case == "broken-duplicate-device-ip"
    assert _validator().is_valid(document(case)) is structural


def test_the_schema_accepts_every_merge_input():
    assert all(_validator().is_valid(json.loads(p.read_text())) for p in MERGE_INPUTS.iterdir())


def test_the_examples_are_valid_ranktables():
    from deployctl.ranktable.check import check_ranktable

    examples = {p.name: json.loads(p.read_text()) for p in (REPO / "ranktables" / "examples").glob("*.json")}
    assert {name: check_ranktable(doc).kind for name, doc in examples.items()} == {
        "global_ranktable_192.0.2.18.json": "pd-global",
        "local_ranktable_192.0.2.18_45.json": "pd-local",
        "local_ranktable_192.0.2.18_67.json": "pd-local",
        "local_ranktable_192.0.2.18_host.json": "pd-local",
        "global_ranktable_merge.json": "pd-global",
    }
    assert all(check_ranktable(doc).valid and _validator().is_valid(doc) for doc in examples.values())
