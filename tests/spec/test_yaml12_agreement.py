"""The loader and schema agree with an independent YAML 1.2 parser plus plain JSON Schema (check-jsonschema's way).

ruamel.yaml (pure, YAML 1.2) parses; jsonschema's stock Draft 2020-12 validator judges with the schema that
`deployctl schema` prints. Where they read a document the same way, `validate` must say the same thing.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from deployctl.spec.load import check_spec_text
from deployctl.spec.locate import compose_document
from deployctl.spec.schema import schema_text
from tests.spec.corpus import SPECS

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted((SPECS / "examples").glob("*.yaml")) + sorted((ROOT / "playbooks").glob("*.yaml"))

VALID = """\
version: 1
name: demo
hosts:
  node1: {address: 10.200.0.11}
requirements: {cards: 8, ip_forward: true}
model: {served_name: demo-model, max_model_len: 4096, max_num_batched_tokens: 4096}
topology:
  mode: mixed
  instances:
    - {host: node1, devices: [0, 1], port: 8080}
"""


def yaml12(text: str):
    return YAML(typ="safe", pure=True).load(io.StringIO(text))


def schema_paths(data) -> set[str]:
    """The paths plain JSON Schema finds fault with, dotted like deployctl's."""
    validator = Draft202012Validator(json.loads(schema_text()))
    return {"".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path).lstrip(".") or "(root)"
            for e in validator.iter_errors(data)}


def our_paths(text: str) -> set[str]:
    _, errors, _ = check_spec_text(text, "spec.yaml", None, {})
    return {e.dotted_path for e in errors}


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_spec_reads_the_same_as_yaml_1_2(path):
    text = path.read_text()
    assert compose_document(text, {}).data == yaml12(text)


@pytest.mark.parametrize("before, after, path, value", [
    ("ip_forward: true", "ip_forward: yes", "requirements.ip_forward", "yes"),
    ("ip_forward: true", "ip_forward: on", "requirements.ip_forward", "on"),
    ("port: 8080}", "port: 134:20}", "topology.instances[0].port", "134:20"),
    ("cards: 8", "cards: 0:8", "requirements.cards", "0:8"),
])
def test_yaml_1_1_words_are_strings_for_both_and_both_refuse_them(before, after, path, value):
    text = VALID.replace(before, after)
    assert text != VALID
    ours, theirs = compose_document(text, {}).data, yaml12(text)
    assert ours == theirs
    assert our_paths(text) == schema_paths(theirs) == {path}


def test_a_leading_zero_is_refused_where_yaml_1_1_and_1_2_disagree():
    text = VALID.replace("port: 8080}", "port: 010}")
    assert yaml12(text)["topology"]["instances"][0]["port"] == 10  # YAML 1.2; PyYAML's 1.1 reads 8
    _, errors, _ = check_spec_text(text, "spec.yaml", None, {})
    assert [e.render() for e in errors] == ["spec.yaml:10:44: topology.instances[0].port: 010 is ambiguous: "
                                            "write 10 or 8"]


def test_octal_and_hex_in_yaml_1_2_form_agree():
    text = VALID.replace("port: 8080}", "port: 0x1F90}").replace("cards: 8", "cards: 0o10")
    assert compose_document(text, {}).data == yaml12(text)
    assert our_paths(text) == schema_paths(yaml12(text)) == set()


def test_the_valid_document_is_valid_for_both():
    assert our_paths(VALID) == schema_paths(yaml12(VALID)) == set()


def test_a_float_integer_is_refused_here_though_json_schema_accepts_it():
    # JSON Schema counts 8080.0 as an integer; it would render `--port 8080.0`, so deployctl is stricter.
    text = VALID.replace("port: 8080}", "port: 8080.0}").replace("[0, 1]", "[0.0, 1.0]")
    assert compose_document(text, {}).data == yaml12(text)
    assert schema_paths(yaml12(text)) == set()
    assert our_paths(text) == {"topology.instances[0].port", "topology.instances[0].devices[0]",
                               "topology.instances[0].devices[1]"}
