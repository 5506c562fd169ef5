"""Values that end up in a Docker command are refused at their spec path and line: a ':' in weights.dest (the
--volume separator), an image reference outside Docker's grammar (a newline, a space, an upper-case path)."""

from __future__ import annotations

import pytest

from deployctl.spec.image_reference import image_reference_problem
from deployctl.spec.load import check_spec_text

SPEC = """\
version: 1
name: t
hosts:
  node1: {address: 192.0.2.1}
image:
  name: %s
  build: {base: %s, packages: /pkgs/Ascend.zip}
weights: {source: s3://models/m/, dest: %s}
model: {served_name: m}
topology:
  mode: mixed
  instances:
    - {host: node1, devices: [0], port: 8000}
"""
GOOD_IMAGE, GOOD_BASE, GOOD_DEST = "deployctl/vllm:1", "swr.example.com/atelier/pytorch_2_1:2.1.0-cann_8.0.rc3", "/mnt/w"


def check(name=GOOD_IMAGE, base=GOOD_BASE, dest=GOOD_DEST, environ=None):
    text = SPEC % (f'"{name}"', f'"{base}"', f'"{dest}"')
    return check_spec_text(text, "spec.yaml", environ=environ or {})


def test_the_good_values_pass():
    spec, errors, _ = check()
    assert errors == [] and spec.weights.dest == GOOD_DEST


@pytest.mark.parametrize("dest", ["/data/a:b", "/data/m:ro", "/mnt/weights:"])
def test_a_colon_in_weights_dest_is_refused_at_its_line(dest):
    _, errors, _ = check(dest=dest)
    (error,) = errors
    assert (error.dotted_path, error.line) == ("weights.dest", 8) and "':'" in error.message
    assert repr(dest) in error.message and "--volume" in error.message


BAD_IMAGES = [(r"deployctl/vllm:1\nx", "a newline"), ("deployctl/vllm:1 x", "whitespace"),
              (r"deployctl/vllm:1\t", "a tab"), (r"deployctl/vllm\r", "a carriage return"),
              ("Deployctl/VLLM:1", "lower-case"), ("deployctl/vllm:", "image reference"),
              ("deployctl//vllm", "image reference"), ("-deployctl/vllm", "image reference")]


@pytest.mark.parametrize("key,line", [("name", 6), ("base", 7)])
@pytest.mark.parametrize("value,word", BAD_IMAGES)
def test_an_image_reference_outside_dockers_grammar_is_refused_at_its_path(key, line, value, word):
    _, errors, _ = check(**{key: value})
    (error,) = errors
    path = "image.name" if key == "name" else "image.build.base"
    assert (error.dotted_path, error.line) == (path, line) and word in error.message, error.message
    assert "Docker's image reference grammar" in error.message and "\n" not in error.message


def test_an_image_from_a_variable_is_checked_and_named_by_the_variable():
    text = (SPEC % ('"${IMG}"', f'"{GOOD_BASE}"', f'"{GOOD_DEST}"'))
    _, errors, _ = check_spec_text(text, "spec.yaml", environ={"IMG": "registry.example/vllm:1\nINJECTED"})
    (error,) = errors
    assert error.dotted_path == "image.name" and "'${IMG}'" in error.message and "INJECTED" not in error.message


@pytest.mark.parametrize("value", ["ubuntu", "localhost:5000/a/b:c", "[::1]:5000/x:1", "a.b/c__d/e-f:T_1.0",
                                   "registry.example/vllm@sha256:" + "f" * 64, "quay.io/ascend/vllm-ascend:v0.11.0rc1-a3"])
def test_references_docker_parses_pass(value):
    assert image_reference_problem(value) is None


def test_a_repository_name_longer_than_dockers_maximum_is_refused():
    assert "255" in image_reference_problem("r/" + "a" * 254)
