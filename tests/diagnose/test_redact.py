"""Redaction is a pure function: every secret the spec knows, env values in docker inspect, env files by name."""

import json

from deployctl.core import Secret
from deployctl.diagnose.redact import (
    REDACTED, env_allowed, env_file_names, redact_env_entry, redact_inspect, redact_text, secret_values,
)
from deployctl.spec.load import check_spec_text

SPEC = """version: 1
name: red
hosts: {h1: {address: 192.0.2.11}}
image: {name: x:1}
weights: {source: s3://b/m/, dest: /srv/m}
model: {served_name: m}
topology:
  mode: mixed
  instances: [{host: h1, devices: [0], port: 8000}]
env:
  HF_TOKEN: ${HF}
  VLLM_API_KEY: ${KEY}
  PLAIN: visible
"""


def load(text=SPEC, environ=None):
    spec, errors, _ = check_spec_text(text, "spec.yaml", None, environ or {"HF": "hf_abcdef123456", "KEY": "k3y-v4lue"})
    assert not errors, errors
    return spec


def test_secret_values_are_the_specs_secret_env_and_the_s3_credentials_longest_first():
    spec = load()
    environ = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t/KEY+abc", "HOME": "/root"}
    assert secret_values(spec, environ, extra=("profile-secret",)) == (
        "hf_abcdef123456", "profile-secret", "s3cr3t/KEY+abc", "AKIAEXAMPLE", "k3y-v4lue")
    assert "visible" not in secret_values(spec, environ)


def test_redact_text_replaces_every_secret_everywhere():
    text = "token hf_abcdef123456 and again:hf_abcdef123456; key=k3y-v4lue\n"
    assert redact_text(text, ("hf_abcdef123456", "k3y-v4lue")) == (
        f"token {REDACTED} and again:{REDACTED}; key={REDACTED}\n")


def test_a_secret_containing_another_is_replaced_whole():
    assert redact_text("abcdef", secret_values_sorted := ("abcdef", "abc")) == REDACTED
    assert secret_values_sorted  # longest first is secret_values' order


def test_presigned_url_signatures_and_secret_named_pairs_are_redacted():
    text = ("GET http://10.200.0.1:8333/models/a?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2025"
            "&X-Amz-Signature=0123abcd&X-Amz-Expires=3600\n"
            "env: HF_TOKEN=hf_zzz VLLM_API_KEY: sk-1 AWS_SECRET_ACCESS_KEY=abc max_tokens=16 TOKENIZER_DIR=/m\n")
    out = redact_text(text, ())
    assert "0123abcd" not in out and "AKIA%2F2025" not in out and "X-Amz-Expires=3600" in out
    assert f"HF_TOKEN={REDACTED}" in out and f"VLLM_API_KEY: {REDACTED}" in out
    assert f"AWS_SECRET_ACCESS_KEY={REDACTED}" in out
    assert "max_tokens=16" in out  # a lower-case word is not an env variable


def test_env_allow_list():
    assert env_allowed("ASCEND_RT_VISIBLE_DEVICES") and env_allowed("HCCL_IF_IP")
    assert env_allowed("GLOO_SOCKET_IFNAME") and env_allowed("TP_SOCKET_IFNAME")
    assert not env_allowed("HF_TOKEN") and not env_allowed("HCCL_IF_IPX")
    assert redact_env_entry("HCCL_IF_IP=10.0.0.1") == "HCCL_IF_IP=10.0.0.1"
    assert redact_env_entry("PLAIN=visible") == f"PLAIN={REDACTED}"
    assert redact_env_entry("EMPTY=") == f"EMPTY={REDACTED}"
    assert redact_env_entry("NOVALUE") == "NOVALUE"


def test_redact_inspect_replaces_config_env_values_outside_the_allow_list():
    document = [{"Name": "/red-mixed-0", "Config": {
        "Env": ["HF_TOKEN=hf_abcdef123456", "ASCEND_RT_VISIBLE_DEVICES=0,1", "SOMETHING=unlisted-value", "PATH=/usr/bin"],
        "Labels": {"deployctl.deployment": "red"}},
        "Args": ["--served-model-name", "m"], "Note": "the token hf_abcdef123456 echoed elsewhere"}]
    out = redact_inspect(json.dumps(document), ("hf_abcdef123456",))
    assert "hf_abcdef123456" not in out and "unlisted-value" not in out
    env = json.loads(out)[0]["Config"]["Env"]
    assert env == [f"HF_TOKEN={REDACTED}", "ASCEND_RT_VISIBLE_DEVICES=0,1", f"SOMETHING={REDACTED}", "PATH=/usr/bin"]
    assert json.loads(out)[0]["Config"]["Labels"] == {"deployctl.deployment": "red"}


def test_redact_inspect_of_text_that_is_not_json_still_masks_env_strings():
    text = 'Error: truncated [{"Config": {"Env": ["HF_TOKEN=abc", "HCCL_IF_IP=10.0.0.1"'
    out = redact_inspect(text, ())
    assert "abc" not in out and f'"HF_TOKEN={REDACTED}"' in out and '"HCCL_IF_IP=10.0.0.1"' in out


def test_env_file_names_become_redacted_lines():
    assert env_file_names("HF_TOKEN\nVLLM_API_KEY\n\n") == f"HF_TOKEN={REDACTED}\nVLLM_API_KEY={REDACTED}\n"


def test_bytes_secret_and_unset_values():
    from deployctl.spec.model import EnvVar

    spec = load()
    spec = type(spec)(**{**spec.__dict__, "env": (EnvVar("B", Secret(b"bytes-secret"), "${B}"), EnvVar("E", Secret(""), "${E}"),
                                               EnvVar("S", Secret("1"), "${S}"))})
    assert secret_values(spec) == ("bytes-secret",)  # "1" would blank every digit: redacted as a value only
