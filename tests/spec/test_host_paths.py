"""Every path on the hosts in a spec goes through the schema's one `format: host-path` checker (spec/paths.py):
absolute, no control character, no ':' where `docker run --volume` would split, at most PATH_MAX bytes; the keys
are the schema's own list, so a new host path key without the format is caught (issue 39 item 6)."""

from __future__ import annotations

import re

import pytest
import yaml

from deployctl.spec.load import check_spec_text
from deployctl.spec.schema import format_keys, load_schema

BASE = {
    "version": 1, "name": "paths", "hosts": {"node1": {"address": "10.200.0.11"}},
    "image": {"name": "deployctl/standin-vllm:latest"},
    "weights": {"source": "s3://models/m/", "dest": "/mnt/weights/m"},
    "cache": {"compile": True, "dir": "/var/cache/deployctl/compile"},
    "model": {"served_name": "m", "kv_cache_dtype": "int8", "quantization_param_path": "/mnt/weights/m/kv.json"},
    "topology": {"mode": "mixed", "instances": [{"host": "node1", "devices": [0], "port": 8000}]},
}
HOST_PATHS = format_keys("host-path")
# Paths of the machine deployctl runs on (relative to the spec file, or ~): not paths on the hosts.
LOCAL_PATHS = {("image", "build", "packages"), ("image", "build", "recipe"), ("monitor", "out"), ("weights", "source"),
               ("$defs", "ssh", "identity_file"), ("$defs", "ssh", "known_hosts"), ("$defs", "host", "identity_file"),
               ("$defs", "host", "known_hosts")}
NOT_PATHS = {("model", "served_name"), ("model", "family"),  # names whose descriptions speak of files
             ("monitor", "prometheus_url"),  # a URL
             # the draft model as the container sees it, or a Hugging Face name (rules_profile.py checks it lies under
             # weights.dest, the one host directory mounted there)
             ("$defs", "dp_group", "speculative", "model")}
BAD = {
    "relative": ("mnt/weights/m", "is not an absolute path"),
    "nul": ("/mnt/we\0ights", "contains the control character '\\x00'"),
    "newline": ("/mnt/weights\n/m", "contains the control character '\\n'"),
    "colon": ("/mnt/weights:ro", "contains ':', which `docker run --volume SOURCE:TARGET` reads as a separator"),
    "too-long": ("/" + "a" * 4096, "is longer than 4096 bytes"),
}


def _spec(path: tuple, value: str) -> str:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return yaml.safe_dump(doc, allow_unicode=False, width=10000)


def _string_keys(node, path=()):
    """(path, property) of every string-valued key in the schema (a list item `*`, a definition under $defs)."""
    if not isinstance(node, dict):
        return
    for key, value in node.get("properties", {}).items():
        kinds = value.get("type") if isinstance(value, dict) else None
        if kinds == "string" or (isinstance(kinds, list) and "string" in kinds):
            yield path + (key,), value
        yield from _string_keys(value, path + (key,))
    if isinstance(node.get("items"), dict):
        yield from _string_keys(node["items"], path + ("*",))
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in node.get(key, []):
            yield from _string_keys(sub, path)


def test_the_schema_lists_the_host_paths():
    assert set(HOST_PATHS) == {("weights", "dest"), ("cache", "dir"), ("model", "quantization_param_path")}


def test_every_path_key_is_a_host_path_or_a_local_one():
    """A key whose name or description says it is a path is either checked as a path on the hosts or named here
    as a path of the controller: a new one (a mount, a log directory) cannot skip the checker unseen."""
    schema = load_schema()
    keys = list(_string_keys(schema))
    for name, definition in schema.get("$defs", {}).items():
        keys += list(_string_keys(definition, ("$defs", name)))
    pathlike = {path for path, node in keys
                if re.search(r"path|dir|dest|file|folder|mount|out$", path[-1])
                or re.search(r"\b(path|directory|folder|file)\b", node.get("description", ""))}
    unchecked = {p for p in pathlike if p not in HOST_PATHS and p not in LOCAL_PATHS | NOT_PATHS}
    assert not unchecked, f"path keys with no host-path format and not listed as local: {sorted(unchecked)}"


def test_the_base_spec_is_valid():
    assert check_spec_text(yaml.safe_dump(BASE), "spec.yaml", environ={})[1] == []


@pytest.mark.parametrize("path", HOST_PATHS, ids=[".".join(p) for p in HOST_PATHS])
@pytest.mark.parametrize("bad", list(BAD))
def test_a_bad_host_path_is_refused_at_its_key(path, bad):
    value, said = BAD[bad]
    _, errors, _ = check_spec_text(_spec(path, value), "spec.yaml", environ={})
    here = [e for e in errors if e.dotted_path == ".".join(path)]
    assert here and said in here[0].message and "Traceback" not in here[0].message, errors
    assert all(e.dotted_path == ".".join(path) for e in errors), errors  # said once, at its key


@pytest.mark.parametrize("path", HOST_PATHS, ids=[".".join(p) for p in HOST_PATHS])
def test_an_unnormal_host_path_is_taken_and_compared_in_normal_form(path):
    """`..`, `.` and `//` are for the comparisons to fold (cache.dir overlapping weights.dest), not errors."""
    _, errors, _ = check_spec_text(_spec(path, "/srv/x/../models//y/."), "spec.yaml", environ={})
    assert errors == []
