"""Every `env:` of a spec follows the same rules: the spec's and each DP group's (vllm-ascend) refuse control
characters at their path and line, hold `${VAR}` secrets, and warn on a literal under a name that says secret."""

from __future__ import annotations

import pytest

from deployctl.core import Secret
from deployctl.spec.load import check_spec_text
from deployctl.spec.secret_names import looks_secret
from tests.spec.test_upstream_build import QWEN3

BASE = QWEN3 % "internal"
GROUP_ENV = "env: {HCCL_BUFFSIZE: 1024}"
assert GROUP_ENV in BASE
SECRET_VALUE = "s3cr3t-value-never-shown"


def spec_with(where: str, entries: str) -> str:
    """QWEN3 with `entries` (YAML flow mapping items) in the spec's env or in the prefill group's env."""
    if where == "spec":
        return BASE + f"env: {{{entries}}}\n"
    return BASE.replace(GROUP_ENV, f"env: {{HCCL_BUFFSIZE: 1024, {entries}}}")


PATHS = {"spec": "env", "group": "topology.prefill[0].env"}


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("where", ["spec", "group"])
@pytest.mark.parametrize("value,char", [(r'"a\nb"', "a newline"), (r'"a\rb"', "a carriage return"),
                                        (r'"a\0b"', "a NUL byte"), (r'"a\tb"', "a tab")])
def test_a_control_character_in_any_env_is_refused_at_its_path_and_line(where, value, char):
    text = spec_with(where, f"X: {value}")
    spec, errors, _ = check_spec_text(text, "spec.yaml", environ={})
    assert spec is None
    (error,) = errors
    assert error.dotted_path == f"{PATHS[where]}.X" and char in error.message
    assert error.line == line_of(text, "X: ") and error.column > 1


@pytest.mark.parametrize("where", ["spec", "group"])
def test_a_secret_with_a_newline_is_refused_without_showing_it(where):
    text = spec_with(where, 'X: "${S}"')
    _, errors, _ = check_spec_text(text, "spec.yaml", environ={"S": "line1\nLD_PRELOAD=/tmp/x.so"})
    (error,) = errors
    assert error.dotted_path == f"{PATHS[where]}.X" and "'${S}'" in error.message and "a newline" in error.message
    assert "LD_PRELOAD" not in error.message + (error.hint or "")


def test_a_group_env_holds_secrets_as_the_spec_env_does():
    text = spec_with("group", 'HF_TOKEN: "${HF}"')
    spec, errors, warnings = check_spec_text(text, "spec.yaml", environ={"HF": SECRET_VALUE})
    assert errors == [] and warnings == []
    prefill = spec.instances[0]
    env = {e.name: e for e in prefill.env}
    assert isinstance(env["HF_TOKEN"].value, Secret) and env["HF_TOKEN"].display == "${HF}"
    assert env["HF_TOKEN"].value.reveal() == SECRET_VALUE and env["HCCL_BUFFSIZE"].value == "1024"
    # The spec's digest names the variable, never its value (as for the spec's env).
    other, _, _ = check_spec_text(text, "spec.yaml", environ={"HF": "another-value"})
    assert other.digest == spec.digest


def test_an_unset_group_secret_is_forgiven_where_env_is_never_sent():
    text = spec_with("group", 'HF_TOKEN: "${HF}"')
    spec, errors, _ = check_spec_text(text, "spec.yaml", environ={})
    assert spec is None and [e.dotted_path for e in errors] == ["topology.prefill[0].env.HF_TOKEN"]
    spec, errors, _ = check_spec_text(text, "spec.yaml", environ={}, unresolved_env="allow")
    assert errors == [] and spec.unresolved_env == ("HF_TOKEN",)


@pytest.mark.parametrize("where", ["spec", "group"])
@pytest.mark.parametrize("name", ["PRIVATE_KEY", "AUTHORIZATION", "AUTH_HEADER", "PASSPHRASE", "HF_TOKEN",
                                  "DB_PASSWORD", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"])
def test_a_literal_under_a_secret_name_is_a_warning_suggesting_a_reference(where, name):
    text = spec_with(where, f"{name}: {SECRET_VALUE}")
    spec, errors, warnings = check_spec_text(text, "spec.yaml", environ={})
    assert spec is not None and errors == []
    (warning,) = warnings
    assert warning.severity == "warning" and warning.dotted_path == f"{PATHS[where]}.{name}"
    assert warning.line == line_of(text, f"{name}: ") and "${" + name + "}" in warning.hint
    assert SECRET_VALUE not in warning.message + warning.hint


@pytest.mark.parametrize("where", ["spec", "group"])
def test_a_reference_or_a_harmless_name_is_no_warning(where):
    text = spec_with(where, 'PRIVATE_KEY: "${PK}", TOKENIZERS_PARALLELISM: "false", MAX_NUM_BATCHED_TOKENS: 8')
    spec, errors, warnings = check_spec_text(text, "spec.yaml", environ={"PK": SECRET_VALUE})
    assert spec is not None and errors == [] and warnings == []


@pytest.mark.parametrize("name,secret", [
    ("HF_TOKEN", True), ("hf_token", True), ("HFTOKEN", True), ("PRIVATE_KEY", True), ("AUTHORIZATION", True),
    ("AUTH_HEADER", True), ("PASSPHRASE", True), ("VLLM_API_KEY", True), ("OPENAI_APIKEY", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("CLIENT_SECRET", True), ("MY_CREDENTIALS", True), ("PASSWD", True),
    ("TOKENIZERS_PARALLELISM", False), ("MAX_NUM_BATCHED_TOKENS", False), ("AUTHOR", False),
    ("HCCL_BUFFSIZE", False), ("VLLM_USE_V1", False), ("PATH", False), ("PYTORCH_NPU_ALLOC_CONF", False),
    # other common names (issue 39): the secret scanners' keywords, not a list of known variables
    ("MYSQL_PWD", True), ("OPENAI_KEY", True), ("PGPASSWORD", True), ("REDIS_PASS", True), ("DB_CREDS", True),
    ("ANTHROPIC_API_KEY", True), ("SSH_KEY", True), ("KEY", True), ("WANDB_APIKEY", True),
    ("PWD", False), ("OLDPWD", False), ("KEYBOARD_LAYOUT", False), ("PASSES", False), ("HCCL_PASSTHROUGH", False),
])
def test_the_one_list_of_secret_names(name, secret):
    assert looks_secret(name) is secret
