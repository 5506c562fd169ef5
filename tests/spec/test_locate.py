"""YAML text -> data with positions: anchors, aliases and merge keys as YAML defines them, bounded expansion."""

from __future__ import annotations

import pytest

from deployctl.spec.locate import SyntaxProblem, compose_document
from deployctl.spec.yaml12 import MAX_DEPTH, MAX_VALUES

MERGES = """\
defaults: &defaults {user: root, port: 22}
jump: &jump {port: 2222, jump: bastion}
one:
  <<: *defaults
  port: 2200
two:
  <<: [*jump, *defaults]
three:
  port: 1
  <<: *defaults
four:
  <<: *defaults
"""


def test_merge_keys_are_applied_as_yaml_defines_them():
    document = compose_document(MERGES, {})
    assert document.problems == []
    assert document.data["one"] == {"user": "root", "port": 2200}  # written keys override merged ones
    assert document.data["two"] == {"port": 2222, "jump": "bastion", "user": "root"}  # first of a list wins
    assert document.data["three"] == {"port": 1, "user": "root"}  # whether written before or after <<
    assert document.data["four"] == {"user": "root", "port": 22}


def test_merged_values_are_located_where_they_are_written():
    document = compose_document(MERGES, {})
    assert document.locate(("four", "user")) == (1, 28)
    assert document.locate(("four", "port"), key=True) == (1, 34)
    assert document.locate(("one", "port")) == (5, 9)
    assert document.locate(("two", "port")) == (2, 20)
    assert document.locate(("two", "user")) == (1, 28)


def test_a_key_written_twice_is_a_duplicate_even_beside_a_merge():
    document = compose_document("d: &d {a: 1}\nm:\n  <<: *d\n  a: 2\n  a: 3\n", {})
    assert [p.render() for p in document.problems] == [
        "spec.yaml:5:3: m.a: duplicate key 'a' (first defined on line 4)"]
    assert document.data["m"] == {"a": 2}


def test_two_merges_of_the_same_key_are_not_duplicates():
    document = compose_document("a: &a {k: 1}\nb: &b {k: 2}\nm:\n  <<: *a\n  <<: *b\n", {})
    assert document.problems == [] and document.data["m"] == {"k": 2}


def test_nested_merges():
    document = compose_document("base: &base {a: 1, b: 1}\nmid: &mid {<<: *base, b: 2, c: 2}\ntop: {<<: *mid}\n", {})
    assert document.problems == [] and document.data["top"] == {"a": 1, "b": 2, "c": 2}


def test_a_merge_of_something_else_than_mappings_is_an_error():
    document = compose_document("s: &s [1]\nm:\n  <<: *s\n  x: 1\nn: {<<: 5}\n", {})
    assert [p.render() for p in document.problems] == [
        "spec.yaml:1:4: m: a merge key (<<) takes a mapping or a list of mappings",
        "spec.yaml:5:9: n: a merge key (<<) takes a mapping or a list of mappings"]
    assert document.data["m"] == {"x": 1}


def test_an_alias_repeats_the_anchored_value():
    document = compose_document("a: &x [1, 2]\nb: *x\nc: {k: &y v}\nd: *y\n", {})
    assert document.data == {"a": [1, 2], "b": [1, 2], "c": {"k": "v"}, "d": "v"}
    assert document.data["a"] is not document.data["b"]  # plain data, each value its own


def test_an_anchor_defined_again_means_the_latest_one_from_there_on():
    document = compose_document("a: &x 1\nb: *x\nc: &x 2\nd: *x\n", {})
    assert document.problems == [] and document.data == {"a": 1, "b": 1, "c": 2, "d": 2}


def refusal(text: str) -> str:
    with pytest.raises(SyntaxProblem) as raised:
        compose_document(text, {})
    return raised.value.problem.render()


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """The classic: level i is `width` aliases of level i-1, so the last one expands to width**levels values."""
    names = "abcdefghijklmnopqrstuvwxyz"[:levels]
    lines = [f"a: &a [{','.join(['lol'] * width)}]"]
    lines += [f"{name}: &{name} [{','.join(['*' + before] * width)}]" for before, name in zip(names, names[1:])]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_the_limit():
    text = billion_laughs()
    assert len(text) < 400
    assert refusal(text).endswith(f"(root): the spec expands to more than {MAX_VALUES} values (YAML aliases?)")


def test_expansion_below_the_limit_is_fine():
    document = compose_document(billion_laughs(levels=4, width=9), {})  # 9 + 81 + 729 + 6561 values
    assert len(document.data["d"]) == 9 and document.data["d"][8][8][8] == ["lol"] * 9


def test_a_merge_bomb_is_refused():
    lines = ["m0: &m0 {k: v}"] + [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}" for i in range(1, 9)]
    assert refusal("\n".join(lines) + "\n").endswith("values (YAML aliases?)")


def test_aliases_cannot_nest_past_the_depth_limit():
    # Each anchor is shallow; through aliases each level adds 10 more.
    lines = ["l0: &l0 " + "[" * 10 + "]" * 10]
    lines += [f"l{i}: &l{i} " + "[" * 9 + f"*l{i - 1}" + "]" * 9 for i in range(1, 10)]
    assert refusal("\n".join(lines) + "\n").endswith(f"(root): the spec nests deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("text, where", [("a: &a\n  b: *a\n", "1:4"), ("a: &a [1, *a]\n", "1:4"),
                                         ("a: &a {<<: *a}\n", "1:4"), ("a: &a\n  b: {<<: *a}\n", "1:4")])
def test_an_alias_inside_its_own_anchor_is_refused(text, where):
    assert refusal(text) == (f"spec.yaml:{where}: (root): an alias refers to a value that contains it "
                             "(the spec would be infinite)")


def test_an_undefined_alias_is_a_syntax_error():
    assert refusal("a: *nope\n") == "spec.yaml:1:4: (root): YAML syntax error: found undefined alias 'nope'"
