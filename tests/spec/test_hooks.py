"""`hooks:` in the spec: the loader builds each point's command, place, timeout and env (a ${VAR} a Secret), and
`validate` refuses a malformed hook at its YAML path and line."""

from __future__ import annotations

import json

import pytest

from deployctl.core import Secret
from deployctl.errors import SpecError
from deployctl.spec.load import check_spec_text, load_spec_text
from deployctl.spec.model import DEFAULT_HOOK_TIMEOUT
from tests.spec.test_front_rules import MIXED, ROUTER
from tests.spec.test_validate_cli import deployctl

BASE = MIXED % ROUTER


def problems(hooks: str, environ=None) -> list[tuple[int, str, str]]:
    """(line, path, message) of each error of BASE + `hooks` (the hooks start at line BASE_LINES + 1)."""
    _spec, errors, _warnings = check_spec_text(BASE + hooks, environ=environ or {})
    return [(p.line - BASE.count("\n"), p.dotted_path, p.message) for p in errors]


def test_the_loader_builds_each_hook_in_point_order_with_its_defaults():
    spec = load_spec_text(BASE + """hooks:
  post_up: {command: [curl, -fsS, "http://lb/enable"], on: hosts, timeout: 20}
  pre_up:
    command: [./register.sh]
    env: {TOKEN: "${CATALOG_TOKEN}", RETRIES: 3, DRY: false}
""", environ={"CATALOG_TOKEN": "tok-123456"})
    assert [h.point for h in spec.hooks] == ["pre_up", "post_up"]
    pre, post = spec.hooks
    assert pre.command == ("./register.sh",) and pre.on == "control" and pre.timeout == DEFAULT_HOOK_TIMEOUT
    assert [(v.name, v.value, v.display) for v in pre.env] == [
        ("TOKEN", Secret("tok-123456"), "${CATALOG_TOKEN}"), ("RETRIES", "3", "3"), ("DRY", "false", "false")]
    assert post.on == "hosts" and post.timeout == 20 and post.command[-1] == "http://lb/enable"
    assert spec.hook("on_failure") is None and load_spec_text(BASE).hooks == ()


def test_a_hook_env_secret_is_kept_out_of_the_spec_digest():
    text = BASE + 'hooks: {pre_up: {command: [x], env: {T: "${T}"}}}\n'
    assert load_spec_text(text, environ={"T": "one-value"}).digest == load_spec_text(text, environ={"T": "other"}).digest


@pytest.mark.parametrize("hooks, expected", [
    ("hooks:\n  pre_up: {command: []}\n", (2, "hooks.pre_up.command", "[] should not be empty")),
    ("hooks:\n  pre_up: {command: ['', x]}\n", (2, "hooks.pre_up.command[0]", "'' should not be empty")),
    ("hooks:\n  pre_up:\n    command: [true]\n", (3, "hooks.pre_up.command[0]", "true should be a string, not true/false")),
    ("hooks:\n  pre_up: {}\n", (2, "hooks.pre_up.command", "missing required key 'command'")),
    ("hooks:\n  post_up: {command: [x], on: everywhere}\n", (2, "hooks.post_up.on",
                                                            "'everywhere' is not one of control, hosts")),
    ("hooks:\n  post_up: {command: [x], timeout: 0}\n", (2, "hooks.post_up.timeout", "0 should be at least 1")),
    ("hooks:\n  post_up: {command: [x], timeout: 86401}\n", (2, "hooks.post_up.timeout",
                                                            "86401 should be at most 86400")),
    ("hooks:\n  pre_deploy: {command: [x]}\n", (2, "hooks.pre_deploy", "unknown key 'pre_deploy' — did you mean 'pre_down'?")),
    ("hooks:\n  post_down: [echo, hi]\n", (2, "hooks.post_down",
                                          '["echo", "hi"] should be a mapping (key: value), not a list')),
    ("hooks:\n  pre_down:\n    command: [echo, '${TOKEN}']\n", (3, "hooks.pre_down.command[1]",
                                                               "'${TOKEN}': a ${VAR} reference is not allowed here")),
    ('hooks:\n  pre_up: {command: ["a\\0b"]}\n', (2, "hooks.pre_up.command[0]",
                                                 "'a\\x00b' holds a NUL byte: no command can take it as a word")),
    ("hooks:\n  pre_up: {command: [x], env: {1BAD: y}}\n", (2, "hooks.pre_up.env.1BAD",
                                                            "'1BAD' is not an environment variable name")),
])
def test_validate_refuses_a_malformed_hook_at_its_path_and_line(hooks, expected):
    found = problems(hooks, {"TOKEN": "value-of-token"})
    assert found[:1] == [expected], found


def test_an_unset_hook_secret_is_an_error_at_its_path():
    with pytest.raises(SpecError) as raised:
        load_spec_text(BASE + 'hooks: {pre_up: {command: [x], env: {T: "${HOOK_UNSET_VAR}"}}}\n', environ={})
    assert [p.dotted_path for p in raised.value.problems] == ["hooks.pre_up.env.T"]


def test_validate_names_the_file_line_and_path_of_a_bad_hook(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(BASE + "hooks:\n  post_up:\n    command: [./smoke]\n    timeout: -5\n")
    result = deployctl("validate", str(path), "--output", "json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (error,) = json.loads(result.stdout)["errors"]
    assert (error["line"], error["path"], error["message"]) == (
        BASE.count("\n") + 4, "hooks.post_up.timeout", "-5 should be at least 1")
