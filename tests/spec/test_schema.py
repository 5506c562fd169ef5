"""The shipped JSON Schema: valid Draft 2020-12, closed objects, described properties, what `schema` prints."""

from __future__ import annotations

import json
import subprocess
import sys

from jsonschema import Draft202012Validator

from deployctl.spec.schema import load_schema


def _walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, path + (index,))


def test_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(load_schema())
    assert load_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_object_is_closed():
    objects = [(path, node) for path, node in _walk(load_schema()) if node.get("type") == "object"]
    assert len(objects) >= 12
    for path, node in objects:
        assert "additionalProperties" in node, path
        if "properties" in node:  # a record; the maps (hosts, env) constrain their values instead
            assert node["additionalProperties"] is False, path


def test_every_property_has_a_description():
    schema = load_schema()
    for path, node in _walk(schema):
        for name, prop in node.get("properties", {}).items() if path[-1:] != ("properties",) else ():
            assert prop.get("description"), path + (name,)


def test_patterns_and_optional_keys():
    schema = load_schema()
    assert schema["properties"]["name"]["pattern"] == "^[a-z0-9-]{1,40}$"
    assert schema["required"] == ["version", "name", "hosts", "model", "topology"]
    assert "required" not in schema["properties"]["image"]  # image.name: required by `up` only
    assert "required" not in schema["properties"]["weights"]
    assert schema["properties"]["model"]["required"] == ["served_name"]


def test_schema_command_prints_the_schema():
    result = subprocess.run([sys.executable, "-m", "deployctl", "schema"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(result.stdout) == load_schema()


def _string_properties(node, path=()):
    """(path, schema) of every string-valued property of the schema."""
    if isinstance(node, dict):
        for key, child in node.get("properties", {}).items():
            if isinstance(child, dict) and child.get("type") == "string":
                yield path + (key,), child
        for key, child in node.items():
            if isinstance(child, (dict, list)):
                yield from _string_properties(child, path + (key,))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _string_properties(child, path + (index,))


def test_every_image_key_goes_through_the_image_reference_checker():
    """A key that names an image (`image`, `base`, image.name) carries `format: image-reference`, the one checker
    schema.py applies (issue 39: front.image took a space or a leading '-')."""
    from deployctl.spec.schema import FORMATS

    images = [(path, child) for path, child in _string_properties(load_schema())
              if path[-1] in ("image", "base") or path[-2:] == ("image", "name")]
    assert len(images) == 3
    assert [path for path, child in images if child.get("format") != "image-reference"] == []
    used = {child["format"] for _, child in _string_properties(load_schema()) if "format" in child}
    assert used <= set(FORMATS)  # jsonschema ignores a format it has no checker for
