"""The spec's YAML: plain scalars by the YAML 1.2 core schema, standard tags only, bounded input."""

from __future__ import annotations

import math

import pytest

from deployctl.spec.locate import SyntaxProblem, compose_document
from deployctl.spec.yaml12 import MAX_BYTES, MAX_DEPTH, MAX_VALUES


def data(text: str):
    document = compose_document(text, {})
    assert [p.render() for p in document.problems] == []
    return document.data


def problems(text: str) -> list[str]:
    return [p.render() for p in compose_document(text, {}).problems]


def refusal(text: str) -> str:
    with pytest.raises(SyntaxProblem) as raised:
        compose_document(text, {})
    return raised.value.problem.render()


@pytest.mark.parametrize("text, value", [
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"), ("Yes", "Yes"),
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("False", False), ("FALSE", False),
    ("null", None), ("Null", None), ("NULL", None), ("~", None), ("", None),
    ("0", 0), ("10", 10), ("-3", -3), ("+7", 7), ("0o17", 15), ("0x1F", 31), ("0xff", 255),
    ("134:20", "134:20"), ("1:30:00", "1:30:00"), ("0b101", "0b101"), ("1_000", "1_000"),
    ("2024-01-01", "2024-01-01"), ("0o8", "0o8"), ("0xg", "0xg"),
    ("8080.0", 8080.0), ("1.5", 1.5), ("1e3", 1000.0), ("-2.5E-1", -0.25), (".5", 0.5), ("5.", 5.0),
    (".inf", math.inf), ("-.Inf", -math.inf), ("+.INF", math.inf),
    ("'010'", "010"), ('"yes"', "yes"), ("'true'", "true"), ("!!str 10", "10"), ("!!int 10", 10),
    ("!!float 1", 1.0), ("!!bool true", True), ("!!null null", None), ("! 10", "10"),
    ("23.0.6", "23.0.6"), ("<<", "<<"),
])
def test_plain_scalars_resolve_by_the_yaml_1_2_core_schema(text, value):
    got = data(f"v: {text}\n")["v"]
    assert got == value and type(got) is type(value)


def test_nan_is_a_float():
    assert math.isnan(data("v: .nan\n")["v"])


@pytest.mark.parametrize("text, message", [
    ("010", "010 is ambiguous: write 10 or 8"),
    ("-010", "-010 is ambiguous: write -10 or -8"),
    ("0777", "0777 is ambiguous: write 777 or 511"),
    ("089", "089 has a leading zero: write 89"),
    ("00", "00 has a leading zero: write 0"),
])
def test_a_leading_zero_integer_is_an_error_naming_the_value(text, message):
    assert problems(f"port: {text}\n") == [f"spec.yaml:1:7: port: {message}"]


@pytest.mark.parametrize("text, message", [
    ("!!int abc", "'abc' is not a valid !!int"),
    ("!!bool yes", "'yes' is not a valid !!bool"),
    ("!!float x", "'x' is not a valid !!float"),
    ("!!null 0", "'0' is not a valid !!null"),
])
def test_an_explicit_standard_tag_must_fit_its_text(text, message):
    assert problems(f"v: {text}\n") == [f"spec.yaml:1:4: v: {message}"]


def test_keys_are_the_text_written():
    assert data("010: a\nyes: b\n1.0: c\ntrue: d\nTrue: e\n") == {
        "010": "a", "yes": "b", "1.0": "c", "true": "d", "True": "e"}
    assert problems("~: a\n") == ["spec.yaml:1:1: (root): a key must be a plain word"]


@pytest.mark.parametrize("tag", ["!!python/name:os.system", "!!python/object/apply:os.system", "!foo",
                                 "!!binary", "!!timestamp", "!<tag:example.com,2000:x>"])
def test_a_non_standard_tag_is_refused_where_it_is_written(tag):
    shown = "tag:example.com,2000:x" if tag.startswith("!<") else tag
    assert problems(f"a: 1\nrun:\n  cmd: {tag} ls\n") == [
        f"spec.yaml:3:8: run.cmd: the tag '{shown}' is not allowed in a spec"]


def test_a_non_standard_tag_on_a_collection_is_refused():
    assert problems("hosts:\n  n1: !!python/object:x {a: 1}\n  n2: !seq [1]\n") == [
        "spec.yaml:2:7: hosts.n1: the tag '!!python/object:x' is not allowed in a spec",
        "spec.yaml:3:7: hosts.n2: the tag '!seq' is not allowed in a spec"]


@pytest.mark.parametrize("text, where", [
    ("a:\n\tb: 1\n", "spec.yaml:2:1"),
    ("a:\n  b: 1\n\tc: 2\n", "spec.yaml:3:1"),
    ("a: |\n  x\n\ty\n", "spec.yaml:3:1"),
])
def test_a_tab_in_indentation_says_tab(text, where):
    assert refusal(text) == f"{where}: (root): a tab character: YAML indents with spaces only"


def test_a_tab_between_words_is_fine():
    assert data("a:\tb\nc: [1,\t2]\n") == {"a": "b", "c": [1, 2]}


@pytest.mark.parametrize("nest, deep", [
    (lambda n: "[" * n + "]" * n, 100_000),
    (lambda n: "{a: " * n + "1" + "}" * n, 100_000),
    (lambda n: "- " * n + "x", 100_000),
    (lambda n: "".join(" " * i + "a:\n" for i in range(n)), 1000),
], ids=["flow-lists", "flow-mappings", "block-lists", "block-mappings"])
def test_deep_nesting_is_refused_without_recursion_error(nest, deep):
    assert data(nest(MAX_DEPTH - 1))
    assert refusal(nest(deep)).endswith(f"(root): the spec nests deeper than {MAX_DEPTH} levels")


@pytest.fixture
def strict_fast_parser(monkeypatch):
    """libyaml with a nesting limit of its own below deployctl's (as 0.2.6+ has at 1000 flow levels)."""
    import yaml

    from deployctl.spec import yaml12

    fast, pure = yaml12._loader_classes()

    class Strict(fast):
        def __init__(self, stream) -> None:
            super().__init__(stream)
            self.text = stream

        def get_single_node(self):
            if self.text.count("[") > 10:  # the libyaml wheel's scanner error, read ahead of the composer
                raise yaml.scanner.ScannerError("while increasing flow level", None,
                                                "exceeded maximum nesting depth", None)
            return super().get_single_node()

    monkeypatch.setattr(yaml12, "_LOADERS", (Strict, pure))


def test_deployctl_refuses_deep_nesting_whatever_limits_the_yaml_library_has(strict_fast_parser):
    deep = "[" * 2000 + "]" * 2000
    assert refusal(deep) == f"spec.yaml:1:{MAX_DEPTH + 1}: (root): the spec nests deeper than {MAX_DEPTH} levels"
    # nothing of deployctl's to refuse: the library's own error stands
    assert "exceeded maximum nesting depth" in refusal("a: [[[[[[[[[[[1]]]]]]]]]]]\n")


def test_more_values_than_the_limit_are_refused_while_composing():
    flat = "".join(f"- {i}\n" for i in range(MAX_VALUES + 1))
    assert refusal(flat) == f"spec.yaml:{MAX_VALUES}:3: (root): the spec has more than {MAX_VALUES} values"
    assert len(data("".join(f"- {i}\n" for i in range(MAX_VALUES - 1)))) == MAX_VALUES - 1


@pytest.mark.parametrize("char, what", [("\0", "a NUL byte: this is not a text file"),
                                        ("\x1b", "the control character U+001B is not allowed in YAML"),
                                        ("\x7f", "the control character U+007F is not allowed in YAML")])
def test_a_character_yaml_does_not_allow_is_refused_at_its_place(char, what):
    assert refusal(f"a: 1\nb: x{char}y\n") == f"spec.yaml:2:5: (root): {what}"


def test_unicode_text_is_fine():
    assert data("name: \u00e9t\u00e9 \U0001f680\n") == {"name": "\u00e9t\u00e9 \U0001f680"}


def test_text_over_the_size_limit_is_refused():
    assert refusal("#" * (MAX_BYTES + 1)) == "spec.yaml:1:1: (root): the spec is larger than 4 MiB; a spec is a few KiB of YAML"
